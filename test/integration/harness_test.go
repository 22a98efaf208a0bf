package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/portside-io/portside/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestHarnessServesRealAPIServer proves the harness: a real kube-apiserver
// v1.37 stores a Node carrying the uninitialized taint and a shared informer
// delivers it with the taint intact.
func TestHarnessServesRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := testenv.Client(t)

	info, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.GitVersion, "v1.37.") {
		t.Fatalf("apiserver reports %s, want v1.37.x", info.GitVersion)
	}
	t.Logf("real kube-apiserver %s at %s", info.GitVersion, testenv.ControlPlane(t).URL)

	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	seen := make(chan *corev1.Node, 1)
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n := obj.(*corev1.Node); n.Name == "harness-node" {
				seen <- n
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer factory.Shutdown() // runs after close(stop) below
	defer close(stop)
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		t.Fatal("node informer did not sync")
	}

	taint := corev1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "harness-node"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{taint}},
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) }()

	select {
	case got := <-seen:
		// The apiserver's admission may add its own not-ready taint; ours must be there.
		found := false
		for _, tn := range got.Spec.Taints {
			found = found || tn == taint
		}
		if !found {
			t.Fatalf("informer delivered taints %v, want %v among them", got.Spec.Taints, taint)
		}
		if got.UID == "" || got.ResourceVersion == "" {
			t.Fatalf("node %q lacks server-set fields: uid=%q rv=%q", got.Name, got.UID, got.ResourceVersion)
		}
	case <-ctx.Done():
		t.Fatal("informer never delivered the node")
	}
}

// BenchmarkCreateTaintedNode measures one Node create on the real control
// plane: the floor every node-initialization figure of `make bench` sits on.
func BenchmarkCreateTaintedNode(b *testing.B) {
	client := testenv.Client(b)
	ctx := context.Background()
	taint := corev1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	names := make([]string, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-node-"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{taint}}}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			b.Fatalf("create %d: %v", i, err)
		}
		names = append(names, created.Name)
	}
	b.StopTimer()
	for _, n := range names {
		_ = client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
}
