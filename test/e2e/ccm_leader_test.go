package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const leaseDuration = 4 * time.Second

// TestLeaderElection: of two `portside ccm` replicas exactly one leads; a
// gracefully stopped leader hands over at once (lease released); a killed
// leader is replaced within the lease duration; the new leader works.
func TestLeaderElection(t *testing.T) {
	bin, _ := buildPortside(t)
	client := testenv.Client(t)
	lc := localcloudtest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(id string) *proc.Process {
		p, err := proc.Start(id, bin, []string{"ccm", "--cloud-provider=local", "--cloud-config=" + cfg,
			"--kubeconfig=" + testenv.Kubeconfig(t), "--secure-port=0", "--bind-address=127.0.0.1",
			"--leader-elect-identity=" + id, "--leader-elect-lease-duration=" + leaseDuration.String(),
			"--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}, nil, filepath.Join(dir, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(5 * time.Second) })
		return p
	}
	holder := func() string {
		l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "cloud-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	waitHolder := func(want func(string) bool, timeout time.Duration) (string, time.Duration) {
		t.Helper()
		begin := time.Now()
		for {
			if h := holder(); want(h) {
				return h, time.Since(begin)
			}
			if time.Since(begin) > timeout {
				t.Fatalf("lease holder is %q after %v", holder(), timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	replicas := map[string]*proc.Process{"replica-a": start("replica-a"), "replica-b": start("replica-b")}
	leader, _ := waitHolder(func(h string) bool { return replicas[h] != nil }, 30*time.Second)
	time.Sleep(2 * time.Second) // let both settle
	leading := 0
	for id, p := range replicas {
		log, _ := os.ReadFile(p.LogPath)
		if strings.Contains(string(log), "Became leader") {
			leading++
			if id != leader {
				t.Fatalf("%s started controllers but %s holds the lease", id, leader)
			}
		}
	}
	if leading != 1 {
		t.Fatalf("%d replicas lead, want exactly 1", leading)
	}

	// Graceful stop: the lease is released and the standby takes over at once.
	other := map[string]string{"replica-a": "replica-b", "replica-b": "replica-a"}
	replicas[leader].Stop(10 * time.Second)
	if err := replicas[leader].ExitErr(); err != nil && !strings.Contains(err.Error(), "status 0") {
		t.Errorf("graceful stop exit: %v\n%s", err, replicas[leader].LogTail(10))
	}
	newLeader, took := waitHolder(func(h string) bool { return h == other[leader] }, leaseDuration+3*time.Second)
	t.Logf("graceful hand-over from %s to %s took %v", leader, newLeader, took)
	if took > 2*time.Second {
		t.Errorf("graceful hand-over took %v; the lease should have been released", took)
	}
	replicas[leader] = start(leader)

	// Crash: the standby takes over within the lease duration.
	time.Sleep(time.Second)
	replicas[newLeader].Kill()
	killedAt := time.Now()
	third, _ := waitHolder(func(h string) bool { return h == leader }, leaseDuration+5*time.Second)
	took = time.Since(killedAt)
	t.Logf("take-over after killing %s: %s leads after %v (lease duration %v)", newLeader, third, took, leaseDuration)
	if took > leaseDuration+2*time.Second {
		t.Errorf("take-over took %v, more than the lease duration %v + 2 retry periods", took, leaseDuration)
	}

	// The new leader runs the controllers.
	if _, err := lc.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: "after-failover", Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	if err := nodesim.New(client, 1).Register(context.Background(), []nodesim.NodeSpec{{Name: "after-failover"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "after-failover", metav1.GetOptions{})
		if err == nil && n.Spec.ProviderID != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new leader did not initialize a node: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
