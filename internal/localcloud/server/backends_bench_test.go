package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// BenchmarkSetBackends: replacing the backends of 100 load balancers with
// 501 backends each, 16 clients at once (what a CCM does when a node joins a
// large cluster). Reported per load balancer.
func BenchmarkSetBackends(b *testing.B) {
	const lbs, backends = 100, 500
	_, c, hosts := benchLoadBalancers(b, lbs, backends)
	b.ResetTimer()
	for n := range b.N {
		setBackendsRound(b, c, lbs, hosts, n)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*lbs), "µs/lb")
}

// BenchmarkChangeBackends: one node joining 500 others, as PATCHes of 200
// load balancers (one backend added to each), 16 clients at once, as the
// service controller sends them with the incremental host capability.
// Reported per load balancer.
func BenchmarkChangeBackends(b *testing.B) {
	const lbs = 200
	srv, c, _ := benchLoadBalancers(b, lbs, 500)
	before := srv.store.WriteStats()
	b.ResetTimer()
	for n := range b.N {
		changeBackendsRound(b, c, lbs, n)
	}
	b.StopTimer()
	after := srv.store.WriteStats()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*lbs), "µs/lb")
	commits := float64(after.Commits - before.Commits)
	b.ReportMetric(float64(after.Updates-before.Updates)/commits, "updates/commit")
	b.ReportMetric(float64(after.Pages-before.Pages)/commits, "pages/commit")
	b.ReportMetric(float64((after.WriteTime-before.WriteTime).Microseconds())/commits, "write-µs/commit")
}

// TestSetBackendsSmoke runs BenchmarkSetBackends' rounds small, for make
// test: after each round every load balancer has exactly the backends set,
// in the store and in the data plane. No timing is checked.
func TestSetBackendsSmoke(t *testing.T) {
	const lbs, backends = 5, 20
	srv, c, hosts := benchLoadBalancers(t, lbs, backends)
	for n := range 3 {
		want := setBackendsRound(t, c, lbs, hosts, n)
		checkBenchBackends(t, srv, c, lbs, want)
	}
}

// TestChangeBackendsSmoke runs BenchmarkChangeBackends' rounds small: each
// round's backend is added to every load balancer and none is lost.
func TestChangeBackendsSmoke(t *testing.T) {
	const lbs, backends, rounds = 5, 20, 3
	srv, c, hosts := benchLoadBalancers(t, lbs, backends)
	want := slices.Clone(hosts)
	for n := range rounds {
		want = append(want, changeBackendsRound(t, c, lbs, n)...)
		checkBenchBackends(t, srv, c, lbs, want)
	}
}

// setBackendsRound replaces every load balancer's backends with hosts and
// one backend of round n, 16 clients at once; it returns the set.
func setBackendsRound(tb testing.TB, c *client.Client, lbs int, hosts []api.Backend, n int) []api.Backend {
	ctx := context.Background()
	next := append(hosts[:len(hosts):len(hosts)], api.Backend{Name: fmt.Sprintf("new-%d", n), Address: fmt.Sprintf("127.78.0.%d", n%250+1)})
	workqueue.ParallelizeUntil(ctx, 16, lbs, func(i int) {
		if _, err := c.SetBackends(ctx, fmt.Sprintf("lb-%d", i), next); err != nil {
			tb.Error(err)
		}
	})
	return next
}

// changeBackendsRound adds round n's backend to every load balancer, 16
// clients at once; it returns what it added.
func changeBackendsRound(tb testing.TB, c *client.Client, lbs, n int) []api.Backend {
	ctx := context.Background()
	add := []api.Backend{{Name: fmt.Sprintf("new-%d", n), Address: fmt.Sprintf("127.78.%d.%d", n/250%250, n%250+1)}}
	workqueue.ParallelizeUntil(ctx, 16, lbs, func(i int) {
		if _, err := c.ChangeBackends(ctx, fmt.Sprintf("lb-%d", i), add, nil); err != nil {
			tb.Error(err)
		}
	})
	return add
}

// checkBenchBackends: each of the lbs load balancers has exactly want as
// backends, as the API answers (the store) and as the data plane serves.
func checkBenchBackends(tb testing.TB, srv *Server, c *client.Client, lbs int, want []api.Backend) {
	tb.Helper()
	key := func(name, addr string) string { return name + "=" + addr }
	var wantKeys []string
	for _, b := range want {
		wantKeys = append(wantKeys, key(b.Name, b.Address))
	}
	slices.Sort(wantKeys)
	for i := range lbs {
		name := fmt.Sprintf("lb-%d", i)
		lb, err := c.GetLoadBalancer(context.Background(), name)
		if err != nil {
			tb.Fatal(err)
		}
		var stored []string
		for _, b := range lb.Backends {
			stored = append(stored, key(b.Name, b.Address))
		}
		slices.Sort(stored)
		if !slices.Equal(stored, wantKeys) {
			tb.Errorf("%s: stored backends %s, want %s", name, strings.Join(stored, " "), strings.Join(wantKeys, " "))
		}
		h, ok := srv.plane.Health(name)
		if !ok {
			tb.Fatalf("%s: not in the data plane", name)
		}
		var served []string
		for _, b := range h.Backends {
			served = append(served, key(b.Name, b.Address))
		}
		slices.Sort(served)
		if !slices.Equal(served, wantKeys) {
			tb.Errorf("%s: data plane backends %s, want %s", name, strings.Join(served, " "), strings.Join(wantKeys, " "))
		}
	}
}

// benchLoadBalancers starts a cloud without health checks (only the API
// path is measured) with lbs load balancers of the same backends hosts.
func benchLoadBalancers(tb testing.TB, lbs, backends int) (*Server, *client.Client, []api.Backend) {
	opts := testPools()
	opts.DataPlane = dataplane.Options{NoHealthChecks: true}
	srv, err := New(context.Background(), filepath.Join(tb.TempDir(), StateFile), opts)
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() { hs.Close(); srv.Close() })
	c := client.New(hs.URL, testToken)
	ctx := context.Background()
	hosts := make([]api.Backend, backends)
	for i := range hosts {
		hosts[i] = api.Backend{Name: fmt.Sprintf("node-%d", i), Address: fmt.Sprintf("127.77.%d.%d", i/250, i%250+1)}
	}
	workqueue.ParallelizeUntil(ctx, 16, lbs, func(i int) {
		if _, err := c.PutLoadBalancer(ctx, fmt.Sprintf("lb-%d", i), api.LoadBalancerSpec{Cluster: "bench",
			Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 8000 + i, BackendPort: 30000 + i}}, Backends: hosts}); err != nil {
			tb.Error(err)
		}
	})
	if tb.Failed() {
		tb.FailNow()
	}
	return srv, c, hosts
}
