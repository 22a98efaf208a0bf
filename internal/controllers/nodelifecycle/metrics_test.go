package nodelifecycle

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// fakeInstances: instance "gone" does not exist, "stopped" is shut down,
// "flaky" errors, "noshutdown" cannot tell whether it is shut down.
type fakeInstances struct{}

func (fakeInstances) InstanceMetadata(context.Context, cloud.Node) (*cloud.InstanceMetadata, error) {
	return nil, cloud.ErrNotImplemented
}

func (fakeInstances) InstanceExists(_ context.Context, n cloud.Node) (bool, error) {
	switch n.Name {
	case "gone":
		return false, nil
	case "flaky":
		return false, context.DeadlineExceeded
	}
	return true, nil
}

func (fakeInstances) InstanceShutdown(_ context.Context, n cloud.Node) (bool, error) {
	if n.Name == "noshutdown" {
		return false, cloud.ErrNotImplemented
	}
	return n.Name == "stopped", nil
}

func notReady(name string) *corev1.Node {
	n := node(false, false)
	n.Name = name
	return n
}

// gathered returns, for the metric family name, each series' value
// (counter value, or histogram sample count) by its label values joined
// with ",", and whether reg has the family.
func gathered(t *testing.T, reg prometheus.Gatherer, name string) (map[string]float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		out := map[string]float64{}
		for _, m := range mf.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				out[key] = float64(h.GetSampleCount())
			} else {
				out[key] = m.GetCounter().GetValue()
			}
		}
		return out, true
	}
	return nil, false
}

func TestUpstreamMetrics(t *testing.T) {
	objs := []*corev1.Node{notReady("gone"), notReady("stopped"), notReady("running"), notReady("flaky"), notReady("noshutdown"), node(true, false)}
	objs[5].Name = "ready"
	client := fake.NewClientset()
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	for _, n := range objs {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := nodes.Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	c := New(Config{Client: client, Nodes: nodes, Instances: fakeInstances{}, Recorder: record.NewFakeRecorder(100), Workers: 1, Metrics: reg})
	const duration = "cloud_node_lifecycle_controller_monitor_nodes_duration_seconds"
	if got, ok := gathered(t, reg, duration); !ok || got[""] != 0 {
		t.Fatalf("%s before any pass: registered %v, %v", duration, ok, got)
	}

	ctx := context.Background()
	sync := c.metrics.monitor.Track(c.sync)
	c.enqueueCandidates()
	for c.queue.Len() > 0 {
		if got, _ := gathered(t, reg, duration); got[""] != 0 {
			t.Fatalf("pass observed before all its nodes were processed: %v", got)
		}
		key, _ := c.queue.Get()
		_ = sync(ctx, key)
		c.queue.Done(key)
	}
	if got, _ := gathered(t, reg, duration); got[""] != 1 {
		t.Errorf("%s after one pass: %v, want one observation", duration, got)
	}

	calls, ok := gathered(t, reg, "cloud_node_lifecycle_controller_cloud_provider_calls_total")
	if !ok {
		t.Fatal("cloud_node_lifecycle_controller_cloud_provider_calls_total is not registered")
	}
	want := map[string]float64{
		"instance_exists,instance_not_found": 1, // gone
		"instance_exists,error":              1, // flaky
		"instance_exists,success":            3, // stopped, running, noshutdown
		"instance_shutdown,success":          2, // stopped, running
		"instance_shutdown,not_implemented":  1, // noshutdown
	}
	for k, v := range want {
		if calls[k] != v {
			t.Errorf("calls{operation,result=%s} = %v, want %v", k, calls[k], v)
		}
	}
	if len(calls) != len(want) {
		t.Errorf("calls: %v, want %v", calls, want)
	}

	// A period without candidates is a pass too, of about no time.
	c2nodes := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Nodes()
	reg2 := prometheus.NewPedanticRegistry()
	c2 := New(Config{Client: client, Nodes: c2nodes, Instances: fakeInstances{}, Recorder: record.NewFakeRecorder(1), Workers: 1, Metrics: reg2})
	c2.enqueueCandidates()
	if got, _ := gathered(t, reg2, duration); got[""] != 1 {
		t.Errorf("%s after an empty pass: %v, want one observation", duration, got)
	}
}
