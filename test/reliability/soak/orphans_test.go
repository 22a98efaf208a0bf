package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// TestOrphanCollectionRetriesAfterCloudError: a load balancer orphaned
// while the CCM was down (its Service deleted with the finalizer removed by
// hand) must be collected soon after the cloud recovers, even when the
// CCM's first orphan listing failed. Found by the soak: the collector logs
// "Listing load balancers for orphan collection" with a 500 and then waits
// the whole orphan period (5 minutes) before listing again; a 429's
// Retry-After was not honoured either. Fixed: a failed pass is retried
// with backoff (service.NextOrphanPass).
func TestOrphanCollectionRetriesAfterCloudError(t *testing.T) {
	client := testenv.Client(t)
	bin := portsideBinary(t)
	ctx := context.Background()
	cl := startCloud(t)
	cluster := fmt.Sprintf("orphan%06d", rand.IntN(1_000_000))
	ks, err := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: provably this cluster's (cluster UID tag), for a Service
	// that does not exist.
	name := "orphan-" + cluster
	if _, err := cl.client.PutLoadBalancer(ctx, name, api.LoadBalancerSpec{Cluster: cluster,
		Tags: map[string]string{local.TagClusterUID: string(ks.UID), local.TagServiceUID: "00000000-0000-0000-0000-000000000000",
			local.TagServiceName: "default/gone-" + cluster},
		Listeners: []api.Listener{{Protocol: "TCP", Port: 80, BackendPort: 30080}}, Backends: []api.Backend{}}); err != nil {
		t.Fatal(err)
	}
	// The cloud fails every listing while the CCM starts.
	if err := cl.srv.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "GET", PathPrefix: "/v1/load-balancers", ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", cl.endpoint, cl.token)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start("ccm", bin, []string{"ccm", "--cloud-provider=local", "--cloud-config=" + cfg, "--kubeconfig=" + testenv.Kubeconfig(t),
		"--secure-port=0", "--bind-address=127.0.0.1", "--webhook-secure-port=0", "--leader-elect=false", "--cluster-name=" + cluster,
		"--controllers=service"}, nil, filepath.Join(dir, "ccm.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	testenv.Eventually(t, 30*time.Second, "the CCM's orphan listing to fail", func() (bool, string) {
		log, _ := os.ReadFile(p.LogPath)
		return containsAll(string(log), "Listing load balancers for orphan collection", "InjectedFault"), p.LogTail(3)
	})
	if err := cl.srv.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	testenv.Eventually(t, 60*time.Second, "the orphan to be collected after the cloud recovered", func() (bool, string) {
		_, lbs, _ := cl.state(t)
		for _, lb := range lbs {
			if lb.Name == name {
				return false, fmt.Sprintf("%s still there %v after the cloud recovered; CCM log:\n%s", name, time.Since(recovered).Round(time.Second), p.LogTail(5))
			}
		}
		return true, ""
	})
	t.Logf("orphan collected %v after the cloud recovered", time.Since(recovered).Round(10*time.Millisecond))
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
