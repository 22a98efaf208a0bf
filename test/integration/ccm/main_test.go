// Package ccm tests Portside's cloud controller manager end to end on a real
// kube-apiserver with a real local cloud: one cloud and one CCM for the
// package (a CCM owns every node of its cluster), tests use their own nodes.
package ccm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

// TestMain runs the tests on the package's control plane, then stops the
// package's CCM and cloud and removes their directory (state, the cloud's
// token), whether the tests passed or not.
func TestMain(m *testing.M) {
	code := testenv.Run(m)
	fixMu.Lock()
	defer fixMu.Unlock()
	for i := len(fixStops) - 1; i >= 0; i-- { // the CCM before the cloud it calls
		fixStops[i]()
	}
	if fixDir != "" {
		if err := os.RemoveAll(fixDir); err != nil {
			fmt.Fprintln(os.Stderr, "ccm tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type fixture struct {
	cloud   *localcloudtest.Cloud
	client  kubernetes.Interface
	sim     *nodesim.Simulator
	proxy   *nodesim.ProxyStandIn
	metrics string // https address of /metrics
	opts    *manager.Options

	stopCCM func() // stops the running CCM and waits for it
}

// startCCM runs the CCM in-process and returns its /metrics address.
func startCCM(t *testing.T, o *manager.Options) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := manager.Run(ctx, o, manager.DefaultControllers(), func(a string) { addr <- a }); err != nil {
			fmt.Fprintln(os.Stderr, "ccm exited:", err)
		}
	}()
	select {
	case a := <-addr:
		return "https://" + a + "/metrics", func() { cancel(); <-done }
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("CCM did not start serving")
		return "", nil
	}
}

// restartCCM stops the CCM, runs between (the CCM is down), and starts it again.
func (f *fixture) restartCCM(t *testing.T, between func()) {
	t.Helper()
	f.stopCCM()
	between()
	f.metrics, f.stopCCM = startCCM(t, f.opts)
}

var (
	fixOnce sync.Once
	fix     *fixture

	// What TestMain cleans up: the fixture's directory and its stop
	// functions, in start order (recorded as soon as each exists, so a
	// fixture that failed half-way is cleaned up too).
	fixMu    sync.Mutex
	fixDir   string
	fixStops []func()
)

// atExit records a stop function for TestMain.
func atExit(stop func()) {
	fixMu.Lock()
	defer fixMu.Unlock()
	fixStops = append(fixStops, stop)
}

// env starts the package's cloud and CCM once.
func env(t *testing.T) *fixture {
	t.Helper()
	client := testenv.Client(t)
	fixOnce.Do(func() {
		dir, err := os.MkdirTemp("", "portside-ccm-test-")
		if err != nil {
			t.Fatal(err)
		}
		fixMu.Lock()
		fixDir = dir
		fixMu.Unlock()
		lc, stopCloud, err := localcloudtest.StartDetached(dir) // lives as long as the test binary
		if err != nil {
			t.Fatal(err)
		}
		atExit(stopCloud)
		cfg := filepath.Join(dir, "cloud.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
			t.Fatal(err)
		}
		o := manager.NewOptions()
		o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", cfg, testenv.Kubeconfig(t)
		o.LeaderElect = false
		o.SecurePort, o.BindAddress = 0, "127.0.0.1"
		o.NodeMonitorPeriod = 300 * time.Millisecond
		o.NodeStatusUpdateFrequency = time.Second
		metrics, stop := startCCM(t, o)
		proxyCtx, stopProxy := context.WithCancel(context.Background())
		proxy := nodesim.NewProxyStandIn(client)
		go proxy.Run(proxyCtx)
		fix = &fixture{cloud: lc, client: client, sim: nodesim.New(client, 8), proxy: proxy, metrics: metrics, opts: o, stopCCM: stop}
		// restartCCM replaces stopCCM: stop whichever CCM runs at the end.
		atExit(func() { fix.stopCCM() })
		atExit(stopProxy)
	})
	if fix == nil {
		t.Fatal("fixture failed to start")
	}
	return fix
}

// instance creates a cloud instance for a node, deleted when the test ends:
// the cloud outlives a test, and the next run (-count=N) makes it again.
func (f *fixture) instance(t *testing.T, req api.CreateInstanceRequest) *api.Instance {
	t.Helper()
	inst, err := f.cloud.Client.CreateInstance(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.cloud.Client.DeleteInstance(context.Background(), inst.ID); err != nil && !client.IsNotFound(err) {
			t.Errorf("delete instance %s: %v", inst.Name, err)
		}
	})
	return inst
}

// register registers simulated nodes, deleted with their events when the
// test ends: a later run's node of the same name must prove everything
// again, not find this one's events.
func (f *fixture) register(t *testing.T, specs ...nodesim.NodeSpec) {
	t.Helper()
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		f.forgetEvents(t, s.Name)
	}
	t.Cleanup(func() {
		if err := f.sim.Delete(context.Background(), names); err != nil {
			t.Errorf("delete nodes %v: %v", names, err)
		}
	})
	if err := f.sim.Register(context.Background(), specs); err != nil {
		t.Fatal(err)
	}
}

// forgetEvents deletes the events about objects named name (nodes, and
// Services of namespace default) when the test ends.
func (f *fixture) forgetEvents(t *testing.T, name string) {
	t.Helper()
	t.Cleanup(func() {
		sel := fields.OneTermEqualSelector("involvedObject.name", name).String()
		if err := f.client.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: sel}); err != nil {
			t.Errorf("delete events of %s: %v", name, err)
		}
	})
}

// waitNode polls a node until cond holds.
func (f *fixture) waitNode(t *testing.T, name string, timeout time.Duration, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: timed out waiting for %s; last: %+v %v", name, what, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events returns the reasons of the events about a node.
func (f *fixture) events(t *testing.T, node string) map[string]string {
	t.Helper()
	list, err := f.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		out[e.Reason] = e.Message
	}
	return out
}

func tainted(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
