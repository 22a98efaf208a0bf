package node

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

type fakeInstances struct{ md *cloud.InstanceMetadata }

func (f fakeInstances) InstanceMetadata(context.Context, cloud.Node) (*cloud.InstanceMetadata, error) {
	return f.md, nil
}
func (f fakeInstances) InstanceExists(context.Context, cloud.Node) (bool, error)   { return true, nil }
func (f fakeInstances) InstanceShutdown(context.Context, cloud.Node) (bool, error) { return false, nil }

// histogramCount returns the sample count of the histogram name, and
// whether reg has it at all.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name string) (uint64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount(), true
		}
	}
	return 0, false
}

// The upstream-named histograms are registered beside Portside's own, and
// move when a node is initialized.
func TestUpstreamMetricsOnInitialization(t *testing.T) {
	n := tainted(nil)
	n.CreationTimestamp = metav1.NewTime(time.Now().Add(-3 * time.Second))
	client := fake.NewClientset(n)
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	reg := prometheus.NewPedanticRegistry()
	c, err := New(Config{
		Client: client, Nodes: nodes, Recorder: record.NewFakeRecorder(10), Workers: 1, Metrics: reg,
		Instances: fakeInstances{md: &cloud.InstanceMetadata{ProviderID: "local://i-1", Zone: "zone-a", Addresses: cloudAddrs[:1]}},
	})
	if err != nil {
		t.Fatal(err)
	}
	compat := []string{"node_controller_cloud_provider_taint_removal_delay_seconds", "node_controller_initial_node_sync_delay_seconds"}
	for _, name := range compat {
		if count, ok := histogramCount(t, reg, name); !ok || count != 0 {
			t.Fatalf("%s before any initialization: registered %v, count %d", name, ok, count)
		}
	}
	if err := nodes.Informer().GetIndexer().Add(n); err != nil {
		t.Fatal(err)
	}
	if err := c.initNode(context.Background(), n.Name); err != nil {
		t.Fatal(err)
	}
	for _, name := range compat {
		if count, _ := histogramCount(t, reg, name); count != 1 {
			t.Errorf("%s after one initialization: count %d, want 1", name, count)
		}
	}
}
