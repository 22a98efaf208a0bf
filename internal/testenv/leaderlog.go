package testenv

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/migrate"
)

// MigratedControllers are the CCM's names (upstream's, v1.31 on) of the
// controllers leader migration hands over; the configuration's
// cloud-node-lifecycle, route and service are their aliases.
var MigratedControllers = []string{"cloud-node-lifecycle-controller", "node-route-controller", "service-lb-controller"}

var (
	becameLeader = regexp.MustCompile(`"Became leader; starting controllers".* lease="([^"]+)"`)
	ctrlStarted  = regexp.MustCompile(`"Controller started" controller="([^"]+)"`)
	leaseDone    = regexp.MustCompile(`"Shut down; lease released".* lease="([^"]+)"`)
)

// RunningControllers reads a `portside ccm` log (one process's; test/kcmintree's
// logs the same lines) and
// returns the migrated controllers it runs, each with the lease it was
// started under: a controller starts after "Became leader" of its lease
// and stops when that lease is released.
func RunningControllers(log string) map[string]string {
	running, lease := map[string]string{}, ""
	for _, line := range strings.Split(log, "\n") {
		if m := becameLeader.FindStringSubmatch(line); m != nil {
			lease = m[1]
		}
		if m := ctrlStarted.FindStringSubmatch(line); m != nil && slices.Contains(MigratedControllers, m[1]) {
			running[m[1]] = lease
		}
		if m := leaseDone.FindStringSubmatch(line); m != nil {
			for c, l := range running {
				if l == m[1] {
					delete(running, c)
				}
			}
		}
	}
	return running
}

// MigrateCheck runs `portside migrate check -o json` (bin) against
// kubeconfig, writing the leader-migration files into files, and returns
// its report: the plan the leader-migration tests follow.
func MigrateCheck(t testing.TB, bin, kubeconfig, files string) *migrate.Report {
	t.Helper()
	out, err := exec.Command(bin, "migrate", "check", "--kubeconfig="+kubeconfig, "-o", "json", "--write-leader-migration-config="+files).Output()
	var rep migrate.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("portside migrate check: %v, %v\n%s", err, jerr, out)
	}
	return &rep
}

// LeaseHolder returns the holder of Lease kube-system/name ("" when none).
func LeaseHolder(ctx context.Context, client kubernetes.Interface, name string) string {
	l, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
