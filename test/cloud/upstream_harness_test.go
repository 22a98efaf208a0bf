package cloud

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	cloudproviderapi "k8s.io/cloud-provider/api"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
)

// cluster is an in-memory API (client-go's fake clientset) with shared
// informers, enough to run upstream's controllers; no apiserver needed.
type cluster struct {
	ctx     context.Context
	client  *k8sfake.Clientset
	factory informers.SharedInformerFactory
	metrics *controllersmetrics.ControllerManagerMetrics
}

func newCluster(t *testing.T, objs ...runtime.Object) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := k8sfake.NewClientset(objs...)
	c := &cluster{ctx: ctx, client: client, factory: informers.NewSharedInformerFactory(client, 0),
		metrics: controllersmetrics.NewControllerManagerMetrics("portside-test")}
	// Informers are created before Start so that they run; controllers
	// added later get the existing objects replayed as adds.
	c.factory.Core().V1().Nodes().Informer()
	c.factory.Core().V1().Services().Informer()
	c.factory.Start(ctx.Done())
	c.factory.WaitForCacheSync(ctx.Done())
	return c
}

// node returns the informer's Node: what upstream's controllers hand on.
func (c *cluster) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := c.factory.Core().V1().Nodes().Lister().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *cluster) nodes(t *testing.T) []*corev1.Node {
	t.Helper()
	list, err := c.client.CoreV1().Nodes().List(c.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		out[i] = c.node(t, list.Items[i].Name)
	}
	return sortedNodes(out)
}

// eventually polls cond for up to 20 s (two shared cores).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func sortedNodes(nodes []*corev1.Node) []*corev1.Node {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// clusterNode is a Node as a kubelet registers it under an external cloud
// provider: uninitialized taint, addresses, annotations, conditions and
// nodeInfo, none of which cloud.Node carries.
func clusterNode(name, providerID string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			Labels:      map[string]string{corev1.LabelHostname: name, "example.com/pool": "blue"},
			Annotations: map[string]string{"example.com/rack": "r7", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{ProviderID: providerID,
			Taints: []corev1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", SystemUUID: "uuid-" + name, Architecture: "amd64", OperatingSystem: "linux"}},
	}
}

func hasUninitializedTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider })
}
