package service

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// metricsLB is a cloud.LoadBalancers whose host updates fail while failHosts is set.
type metricsLB struct {
	mu        sync.Mutex
	failHosts bool
}

func (*metricsLB) Features() cloud.LoadBalancerFeatures {
	return cloud.LoadBalancerFeatures{Protocols: []corev1.Protocol{corev1.ProtocolTCP}}
}

func (*metricsLB) GetLoadBalancer(context.Context, *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}

func (*metricsLB) EnsureLoadBalancer(context.Context, *cloud.LoadBalancerSpec, []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}, nil
}

func (l *metricsLB) UpdateLoadBalancerHosts(context.Context, *cloud.LoadBalancerSpec, []cloud.Host) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failHosts {
		return errors.New("cloud down")
	}
	return nil
}

func (*metricsLB) EnsureLoadBalancerDeleted(context.Context, *cloud.LoadBalancerSpec) error {
	return nil
}

// upstreamMetrics returns each service_controller_* metric's value
// (counter value, or histogram sample count) by name.
func upstreamMetrics(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if h := m.GetHistogram(); h != nil {
			out[mf.GetName()] = float64(h.GetSampleCount())
		} else {
			out[mf.GetName()] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestUpstreamMetrics(t *testing.T) {
	ctx := context.Background()
	s := svc()
	client := fake.NewClientset(s)
	factory := informers.NewSharedInformerFactory(client, 0)
	services, nodes := factory.Core().V1().Services(), factory.Core().V1().Nodes()
	if err := services.Informer().GetIndexer().Add(s); err != nil {
		t.Fatal(err)
	}
	addNode := func(name string) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "local://" + name}}
		if err := nodes.Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	addNode("n1")
	lb := &metricsLB{}
	reg := prometheus.NewPedanticRegistry()
	c, err := New(Config{Client: client, Services: services, Nodes: nodes, LoadBalancers: lb,
		Recorder: record.NewFakeRecorder(100), ClusterName: "test", Workers: 1, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	sync := c.metrics.nodeSync.Track(c.sync)
	drain := func() {
		t.Helper()
		for c.queue.Len() > 0 {
			key, _ := c.queue.Get()
			_ = sync(ctx, key)
			c.queue.Forget(key)
			c.queue.Done(key)
		}
	}
	const (
		lbSyncs    = "service_controller_loadbalancer_sync_total"
		errs       = "service_controller_nodesync_error_total"
		nodeSync   = "service_controller_nodesync_latency_seconds"
		hostUpdate = "service_controller_update_loadbalancer_host_latency_seconds"
	)
	expect := func(step string, want map[string]float64) {
		t.Helper()
		got := upstreamMetrics(t, reg)
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (registered %v), want %v", step, k, g, ok, v)
			}
		}
	}
	expect("before any sync", map[string]float64{lbSyncs: 0, errs: 0, nodeSync: 0, hostUpdate: 0})

	// Start: the host set is new, the Service gets its load balancer (a
	// full ensure, not a host update), and the node sync is one pass.
	c.recomputeHosts()
	expect("pass begun, nothing synced", map[string]float64{nodeSync: 0})
	drain()
	expect("first sync", map[string]float64{lbSyncs: 0, errs: 0, nodeSync: 1, hostUpdate: 0})

	// A node joins: only the hosts are updated.
	addNode("n2")
	c.recomputeHosts()
	drain()
	expect("node added", map[string]float64{lbSyncs: 1, errs: 0, nodeSync: 2, hostUpdate: 1})

	// A node joins and the host update fails: an error, and the pass
	// still ends (the Service is retried).
	lb.failHosts = true
	addNode("n3")
	c.recomputeHosts()
	drain()
	expect("failed host update", map[string]float64{lbSyncs: 2, errs: 1, nodeSync: 3, hostUpdate: 2})

	// No change of the host set: no node sync.
	c.recomputeHosts()
	expect("host set unchanged", map[string]float64{nodeSync: 3})
}
