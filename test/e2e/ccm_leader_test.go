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
	bin, _ := testenv.BuildPortside(t)
	client := testenv.Client(t)
	lc := localcloudtest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	// This run's own Lease and node: the e2e tests share one apiserver, and
	// a repeated run (-count=N) must not find the last one's (a Node
	// initialized by an earlier run would pass the last check at once).
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	lockName, nodeName := "e2e-ccm-leader-"+run, "after-failover-"+run
	starts := map[string]int{}
	start := func(id string) *proc.Process {
		// Each process its own log, so a restarted replica's log lines are
		// its own (proc.Start appends).
		starts[id]++
		p, err := proc.Start(id, bin, []string{"ccm", "--cloud-provider=local", "--cloud-config=" + cfg,
			"--kubeconfig=" + testenv.Kubeconfig(t), "--secure-port=0", "--bind-address=127.0.0.1",
			"--leader-elect-identity=" + id, "--leader-elect-resource-name=" + lockName, "--leader-elect-lease-duration=" + leaseDuration.String(),
			"--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}, nil, filepath.Join(dir, fmt.Sprintf("%s-%d.log", id, starts[id])))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(5 * time.Second) })
		return p
	}
	// standingBy waits for a replica to have seen the leader and be
	// waiting for the Lease ("Standing by", logged once it has tried for
	// it): a real readiness signal, however long a loaded machine takes to
	// start it.
	standingBy := func(p *proc.Process, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			log, _ := os.ReadFile(p.LogPath)
			if strings.Contains(string(log), "Standing by") {
				return
			}
			select {
			case <-p.Done():
				t.Fatalf("%s exited before standing by: %v\n%s", p.Name, p.ExitErr(), p.LogTail(20))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not standing by after %v:\n%s", p.Name, timeout, p.LogTail(20))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	holder := func() string {
		l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), lockName, metav1.GetOptions{})
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
	other := map[string]string{"replica-a": "replica-b", "replica-b": "replica-a"}
	// The standby has tried for the Lease and lost: only now does "exactly
	// one leads" say something (before, the other might not be up yet).
	standingBy(replicas[other[leader]], 30*time.Second)
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

	// Crash: the standby takes over within the lease duration. It must be
	// up and standing by first, or the take-over time would include its
	// start-up.
	standingBy(replicas[leader], 30*time.Second)
	replicas[newLeader].Kill()
	killedAt := time.Now()
	third, _ := waitHolder(func(h string) bool { return h == leader }, leaseDuration+5*time.Second)
	took = time.Since(killedAt)
	t.Logf("take-over after killing %s: %s leads after %v (lease duration %v)", newLeader, third, took, leaseDuration)
	if took > leaseDuration+2*time.Second {
		t.Errorf("take-over took %v, more than the lease duration %v + 2 retry periods", took, leaseDuration)
	}

	// The new leader runs the controllers.
	if _, err := lc.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: nodeName, Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	sim := nodesim.New(client, 1)
	if err := sim.Register(context.Background(), []nodesim.NodeSpec{{Name: nodeName}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Delete(context.Background(), []string{nodeName}) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		if err == nil && n.Spec.ProviderID != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new leader did not initialize a node: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
