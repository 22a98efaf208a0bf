package ccm

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

const shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"

func (f *fixture) waitGone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not deleted: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInstanceDeletedNodeDeleted(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	inst := f.instance(t, api.CreateInstanceRequest{Name: "lc-deleted", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "lc-deleted"})
	f.waitNode(t, "lc-deleted", 20*time.Second, "initialization", initialized)
	if err := f.cloud.Client.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	// A Ready node is never deleted: the kubelet says it is alive.
	time.Sleep(time.Second)
	f.waitNode(t, "lc-deleted", time.Second, "still there", func(*corev1.Node) bool { return true })
	// Its kubelet stops: NotReady, then deleted.
	if err := f.sim.SetReady(ctx, "lc-deleted", false); err != nil {
		t.Fatal(err)
	}
	f.waitGone(t, "lc-deleted", 10*time.Second)
}

func TestNodeWithoutProviderIDDeletedByName(t *testing.T) {
	f := env(t)
	// Registered NotReady and never initialized (no instance): the instance is
	// looked up by name, found missing, and the node deleted (upstream leaves
	// such nodes forever: cloud-provider-aws#1471).
	f.register(t, nodesim.NodeSpec{Name: "lc-no-providerid", NotReady: true})
	f.waitGone(t, "lc-no-providerid", 10*time.Second)
}

func TestShutdownTaint(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	inst := f.instance(t, api.CreateInstanceRequest{Name: "lc-stopped", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "lc-stopped"})
	f.waitNode(t, "lc-stopped", 20*time.Second, "initialization", initialized)
	if _, err := f.cloud.Client.StopInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	_ = f.sim.SetReady(ctx, "lc-stopped", false)
	f.waitNode(t, "lc-stopped", 10*time.Second, "shutdown taint", func(n *corev1.Node) bool { return tainted(n, shutdownTaint) })
	if _, err := f.cloud.Client.StartInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	_ = f.sim.SetReady(ctx, "lc-stopped", true)
	n := f.waitNode(t, "lc-stopped", 10*time.Second, "shutdown taint removed", func(n *corev1.Node) bool { return !tainted(n, shutdownTaint) })
	if n.Spec.ProviderID == "" {
		t.Fatal("node lost its providerID")
	}
}

func TestFailingCloudDeletesNothing(t *testing.T) {
	f := env(t)
	ctx := context.Background()
	f.instance(t, api.CreateInstanceRequest{Name: "lc-flaky", Zone: "zone-a"})
	f.register(t, nodesim.NodeSpec{Name: "lc-flaky"})
	f.waitNode(t, "lc-flaky", 20*time.Second, "initialization", initialized)
	_ = f.sim.SetReady(ctx, "lc-flaky", false)
	for _, rule := range []api.FaultRule{
		{Method: "GET", PathPrefix: "/v1/instances", ErrorRate: 1},
		{Method: "GET", PathPrefix: "/v1/instances", ThrottleRate: 1, RetryAfterSeconds: 1},
		{Method: "GET", PathPrefix: "/v1/instances", LatencyMillis: 40_000}, // beyond the client timeout
	} {
		if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{rule}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // several node-monitor periods
		if _, err := f.client.CoreV1().Nodes().Get(ctx, "lc-flaky", metav1.GetOptions{}); err != nil {
			t.Fatalf("node deleted (or unreadable) while the cloud was failing with %+v: %v", rule, err)
		}
	}
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	_ = f.sim.SetReady(ctx, "lc-flaky", true)
}
