package server

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

func backendAddrs(bs []api.Backend) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.Name+"="+b.Address)
	}
	slices.Sort(out)
	return out
}

// TestChangeBackends: PATCH .../backends removes, then adds, backends by
// address, leaves the others, is idempotent, persists, and refuses bad
// input and missing load balancers.
func TestChangeBackends(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	spec := api.LoadBalancerSpec{Cluster: "c", Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 80, BackendPort: 30080}},
		Backends: []api.Backend{{Name: "n1", Address: "127.1.0.1"}, {Name: "n2", Address: "127.1.0.2"}}}
	if _, err := c.PutLoadBalancer(ctx, "lb", spec); err != nil {
		t.Fatal(err)
	}
	n, err := c.ChangeBackends(ctx, "lb", []api.Backend{{Name: "n3", Address: "127.1.0.3"}}, []api.Backend{{Name: "n1", Address: "127.1.0.1"}})
	if err != nil || n != 2 {
		t.Fatalf("change: %d, %v", n, err)
	}
	want := []string{"n2=127.1.0.2", "n3=127.1.0.3"}
	lb, err := c.GetLoadBalancer(ctx, "lb")
	if err != nil || !slices.Equal(backendAddrs(lb.Backends), want) {
		t.Fatalf("after the change: %v, %v; want %v", backendAddrs(lb.Backends), err, want)
	}
	h, _ := srv.plane.Health("lb")
	if got := backendAddrs(func() (bs []api.Backend) {
		for _, b := range h.Backends {
			if !b.Draining {
				bs = append(bs, api.Backend{Name: b.Name, Address: b.Address})
			}
		}
		return bs
	}()); !slices.Equal(got, want) {
		t.Errorf("data plane backends %v, want %v", got, want)
	}
	// Repeated: same result.
	if n, err := c.ChangeBackends(ctx, "lb", []api.Backend{{Name: "n3", Address: "127.1.0.3"}}, []api.Backend{{Address: "127.1.0.1"}}); err != nil || n != 2 {
		t.Fatalf("repeated change: %d, %v", n, err)
	}
	// A full PUT after changes replaces the set.
	spec.Backends = []api.Backend{{Name: "n9", Address: "127.1.0.9"}}
	if lb, err := c.PutLoadBalancer(ctx, "lb", spec); err != nil || !slices.Equal(backendAddrs(lb.Backends), []string{"n9=127.1.0.9"}) {
		t.Fatalf("PUT after changes: %v, %v", lb, err)
	}
	if lb, _ := c.GetLoadBalancer(ctx, "lb"); !slices.Equal(backendAddrs(lb.Backends), []string{"n9=127.1.0.9"}) {
		t.Fatalf("GET after PUT: %v", backendAddrs(lb.Backends))
	}
	if counts, _ := srv.BackendCounts("c"); counts["lb"] != 1 {
		t.Errorf("BackendCounts %v", counts)
	}

	for _, tc := range []struct {
		name        string
		lb          string
		add, remove []api.Backend
		status      int
		want        string
	}{
		{"missing load balancer", "nope", nil, nil, http.StatusNotFound, "not found"},
		{"bad address", "lb", []api.Backend{{Name: "x", Address: "not-an-ip"}}, nil, http.StatusBadRequest, "not an IP address"},
	} {
		_, err := c.ChangeBackends(ctx, tc.lb, tc.add, tc.remove)
		var se *client.StatusError
		if !errorsAs(err, &se) || se.Status != tc.status || !strings.Contains(se.Message, tc.want) {
			t.Errorf("%s: %v; want %d %q", tc.name, err, tc.status, tc.want)
		}
	}
	// Over the per-load-balancer limit.
	limits := DefaultLimits()
	limits.BackendsPerLB = 2
	srv.opts.Limits = &limits
	if _, err := c.ChangeBackends(ctx, "lb", []api.Backend{{Name: "a", Address: "127.1.0.21"}, {Name: "b", Address: "127.1.0.22"}}, nil); err == nil || !strings.Contains(err.Error(), "limit is 2") {
		t.Errorf("over the limit: %v", err)
	}
	if lb, _ := c.GetLoadBalancer(ctx, "lb"); len(lb.Backends) != 1 {
		t.Errorf("a refused change was stored: %v", backendAddrs(lb.Backends))
	}
}

// TestInlineBackendsStillRead: a record written before backends had their
// own records (inline) is read, served after a restart and converted by
// its first change.
func TestInlineBackendsStillRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateFile)
	srv, err := New(context.Background(), path, testPools())
	if err != nil {
		t.Fatal(err)
	}
	old := api.LoadBalancer{Name: "old", VIPs: []string{}, State: api.LoadBalancerActive, LoadBalancerSpec: api.LoadBalancerSpec{Cluster: "c",
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 80, BackendPort: 30080}},
		Backends:  []api.Backend{{Name: "n1", Address: "127.1.0.1"}, {Name: "n2", Address: "127.1.0.2"}}}}
	if err := srv.store.Update(func(tx *store.Tx) error { return tx.Put(store.LoadBalancers, "old", old) }); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv, err = New(context.Background(), path, testPools())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if h, ok := srv.plane.Health("old"); !ok || len(h.Backends) != 2 {
		t.Fatalf("restored inline backends: %+v, %v", h, ok)
	}
	var lb api.LoadBalancer
	_ = srv.store.View(func(tx *store.Tx) (err error) { lb, _, err = getLB(tx, "old"); return err })
	if !slices.Equal(backendAddrs(lb.Backends), []string{"n1=127.1.0.1", "n2=127.1.0.2"}) {
		t.Fatalf("inline backends read: %v", backendAddrs(lb.Backends))
	}
	var n int
	if err := srv.store.Update(func(tx *store.Tx) (err error) {
		n, _, err = changeLBBackends(tx, "old", []api.Backend{{Name: "n3", Address: "127.1.0.3"}}, nil)
		return err
	}); err != nil || n != 3 {
		t.Fatalf("change of an inline record: %d, %v", n, err)
	}
	_ = srv.store.View(func(tx *store.Tx) (err error) { lb, _, err = getLB(tx, "old"); return err })
	if !slices.Equal(backendAddrs(lb.Backends), []string{"n1=127.1.0.1", "n2=127.1.0.2", "n3=127.1.0.3"}) {
		t.Fatalf("after converting: %v", backendAddrs(lb.Backends))
	}
}

// TestChangeBackendsAddressReused: a new node given a deleted node's
// address is added first (the backend at that address is renamed to it);
// the deleted node's removal, named, comes later and must leave the new
// node's backend in the store and in the data plane. Unnamed removals
// still remove by address.
func TestChangeBackendsAddressReused(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	spec := api.LoadBalancerSpec{Cluster: "c", Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 80, BackendPort: 30080}},
		Backends: []api.Backend{{Name: "old", Address: "127.1.0.1"}, {Name: "n2", Address: "127.1.0.2"}}}
	if _, err := c.PutLoadBalancer(ctx, "lb", spec); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		add, remove []api.Backend
		want        []string
	}{
		// The new node joins at the old one's address: a rename.
		{add: []api.Backend{{Name: "new", Address: "127.1.0.1"}}, want: []string{"n2=127.1.0.2", "new=127.1.0.1"}},
		// The old node's late removal: not the new node's backend.
		{remove: []api.Backend{{Name: "old", Address: "127.1.0.1"}}, want: []string{"n2=127.1.0.2", "new=127.1.0.1"}},
		// A removal of the new node by name takes it out.
		{remove: []api.Backend{{Name: "new", Address: "127.1.0.1"}}, want: []string{"n2=127.1.0.2"}},
		// A removal and an add of the same address in one change: the
		// named backend goes, the added one comes (the old order).
		{add: []api.Backend{{Name: "n3", Address: "127.1.0.2"}}, remove: []api.Backend{{Name: "n2", Address: "127.1.0.2"}}, want: []string{"n3=127.1.0.2"}},
		// Without a name, by address alone.
		{remove: []api.Backend{{Address: "127.1.0.2"}}, want: []string{}},
	}
	for i, st := range steps {
		if _, err := c.ChangeBackends(ctx, "lb", st.add, st.remove); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		lb, err := c.GetLoadBalancer(ctx, "lb")
		if err != nil || !slices.Equal(backendAddrs(lb.Backends), st.want) {
			t.Fatalf("step %d: stored %v, %v; want %v", i, backendAddrs(lb.Backends), err, st.want)
		}
		h, _ := srv.plane.Health("lb")
		var live []api.Backend
		for _, b := range h.Backends {
			if !b.Draining {
				live = append(live, api.Backend{Name: b.Name, Address: b.Address})
			}
		}
		if got := backendAddrs(live); !slices.Equal(got, st.want) {
			t.Fatalf("step %d: data plane %v, want %v", i, got, st.want)
		}
	}
}

func TestOwnedBy(t *testing.T) {
	for _, tc := range []struct {
		have    string
		removal api.Backend
		want    bool
	}{
		{"n1", api.Backend{Name: "n1", Address: "127.1.0.1"}, true},
		{"n1", api.Backend{Name: "n2", Address: "127.1.0.1"}, false},
		{"n1", api.Backend{Address: "127.1.0.1"}, true},
		{"", api.Backend{Address: "127.1.0.1"}, true},
		{"", api.Backend{Name: "n1", Address: "127.1.0.1"}, true},
	} {
		if got := ownedBy(tc.have, tc.removal); got != tc.want {
			t.Errorf("ownedBy(%q, %+v) = %v, want %v", tc.have, tc.removal, got, tc.want)
		}
	}
}

func errorsAs(err error, target **client.StatusError) bool {
	se, ok := err.(*client.StatusError)
	if ok {
		*target = se
	}
	return ok
}

func TestLoadBalancersWithBackend(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := c.PutLoadBalancer(ctx, name, api.LoadBalancerSpec{Cluster: "c",
			Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 80, BackendPort: 30080}},
			Backends:  []api.Backend{{Name: "n1", Address: "127.1.0.1"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ChangeBackends(ctx, "a", []api.Backend{{Name: "n2", Address: "127.1.0.2"}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cluster, addr string
		all, with     int
	}{{"c", "127.1.0.1", 2, 2}, {"c", "127.1.0.2", 2, 1}, {"c", "127.1.0.9", 2, 0}, {"other", "127.1.0.1", 0, 0}, {"", "127.1.0.2", 2, 1}} {
		all, with, err := srv.LoadBalancersWithBackend(tc.cluster, tc.addr)
		if err != nil || all != tc.all || with != tc.with {
			t.Errorf("%s %s: %d/%d, %v; want %d/%d", tc.cluster, tc.addr, with, all, err, tc.with, tc.all)
		}
	}
}
