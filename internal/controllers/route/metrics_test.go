package route

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// memRoutes is an in-memory cloud.Routes; listErr fails ListRoutes.
type memRoutes struct {
	mu      sync.Mutex
	routes  []cloud.Route
	listErr error
}

func (m *memRoutes) ListRoutes(context.Context, string) ([]cloud.Route, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listErr != nil {
		return nil, m.listErr
	}
	return append([]cloud.Route(nil), m.routes...), nil
}

func (m *memRoutes) CreateRoute(_ context.Context, _, nameHint string, r cloud.Route) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Name = nameHint + "-" + r.DestinationCIDR.String()
	m.routes = append(m.routes, r)
	return nil
}

func (m *memRoutes) DeleteRoute(_ context.Context, _ string, r cloud.Route) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, x := range m.routes {
		if x.Name == r.Name {
			m.routes = append(m.routes[:i], m.routes[i+1:]...)
			break
		}
	}
	return nil
}

// routeSyncs returns route_controller_route_sync_total by "outcome,trigger".
func routeSyncs(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "route_controller_route_sync_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["outcome"]+","+l["trigger"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func podNode(name, cidr string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.NodeSpec{PodCIDRs: []string{cidr}}}
}

func TestRouteSyncTotal(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	cl := &memRoutes{}
	reg := prometheus.NewPedanticRegistry()
	c, err := New(Config{
		Client: client, Nodes: nodes, Routes: cl, Recorder: record.NewFakeRecorder(10), Metrics: reg,
		ClusterName: "test", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		Workers: 1, StatusWorkers: 1, ResyncPeriod: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	// drain processes the route queue as the workers would.
	drain := func() {
		for c.routes.Len() > 0 {
			key, _ := c.routes.Get()
			_ = c.syncNodeCounted(ctx, key)
			c.routes.Done(key)
		}
	}
	expect := func(want map[string]float64) {
		t.Helper()
		got := routeSyncs(t, reg)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("route_sync_total{outcome,trigger=%s} = %v, want %v (all: %v)", k, got[k], v, got)
			}
		}
	}

	// A resync that finds a node without its route: a periodic reconcile
	// that changed a route.
	if err := nodes.Informer().GetIndexer().Add(podNode("a", "10.244.1.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := c.resync(ctx); err != nil {
		t.Fatal(err)
	}
	drain()
	expect(map[string]float64{"changed,periodic": 1})

	// A node event: node_change.
	if err := nodes.Informer().GetIndexer().Add(podNode("b", "10.244.2.0/24")); err != nil {
		t.Fatal(err)
	}
	c.routes.Add("b")
	drain()
	expect(map[string]float64{"changed,periodic": 1, "changed,node_change": 1})

	// A node event with nothing to do: noop.
	c.routes.Add("b")
	drain()
	expect(map[string]float64{"noop,node_change": 1})

	// A resync finding nothing to fix, then one failing to list.
	if err := c.resync(ctx); err != nil {
		t.Fatal(err)
	}
	expect(map[string]float64{"noop,periodic": 1})
	cl.mu.Lock()
	cl.listErr = errors.New("cloud down")
	cl.mu.Unlock()
	if err := c.resync(ctx); err == nil {
		t.Fatal("resync did not fail")
	}
	expect(map[string]float64{"error,periodic": 1, "changed,periodic": 1, "changed,node_change": 1, "noop,node_change": 1, "noop,periodic": 1})
	if got := routeSyncs(t, reg); len(got) != 5 {
		t.Errorf("route_sync_total: %v, want 5 series", got)
	}
}
