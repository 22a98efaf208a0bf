package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
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
	ctx := context.Background()
	b.ResetTimer()
	for n := range b.N {
		next := append(hosts[:backends:backends], api.Backend{Name: fmt.Sprintf("new-%d", n), Address: fmt.Sprintf("127.78.0.%d", n%250+1)})
		workqueue.ParallelizeUntil(ctx, 16, lbs, func(i int) {
			if _, err := c.SetBackends(ctx, fmt.Sprintf("lb-%d", i), next); err != nil {
				b.Error(err)
			}
		})
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
	ctx := context.Background()
	before := srv.store.WriteStats()
	b.ResetTimer()
	for n := range b.N {
		add := []api.Backend{{Name: fmt.Sprintf("new-%d", n), Address: fmt.Sprintf("127.78.%d.%d", n/250%250, n%250+1)}}
		workqueue.ParallelizeUntil(ctx, 16, lbs, func(i int) {
			if _, err := c.ChangeBackends(ctx, fmt.Sprintf("lb-%d", i), add, nil); err != nil {
				b.Error(err)
			}
		})
	}
	b.StopTimer()
	after := srv.store.WriteStats()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*lbs), "µs/lb")
	commits := float64(after.Commits - before.Commits)
	b.ReportMetric(float64(after.Updates-before.Updates)/commits, "updates/commit")
	b.ReportMetric(float64(after.Pages-before.Pages)/commits, "pages/commit")
	b.ReportMetric(float64((after.WriteTime-before.WriteTime).Microseconds())/commits, "write-µs/commit")
}

// benchLoadBalancers starts a cloud without health checks (only the API
// path is measured) with lbs load balancers of the same backends hosts.
func benchLoadBalancers(b *testing.B, lbs, backends int) (*Server, *client.Client, []api.Backend) {
	opts := testPools()
	opts.DataPlane = dataplane.Options{NoHealthChecks: true}
	srv, err := New(context.Background(), filepath.Join(b.TempDir(), StateFile), opts)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(func() { hs.Close(); srv.Close() })
	c := client.New(hs.URL, testToken)
	ctx := context.Background()
	hosts := make([]api.Backend, backends)
	for i := range hosts {
		hosts[i] = api.Backend{Name: fmt.Sprintf("node-%d", i), Address: fmt.Sprintf("127.77.%d.%d", i/250, i%250+1)}
	}
	workqueue.ParallelizeUntil(ctx, 16, lbs, func(i int) {
		if _, err := c.PutLoadBalancer(ctx, fmt.Sprintf("lb-%d", i), api.LoadBalancerSpec{Cluster: "bench",
			Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 8000 + i, BackendPort: 30000 + i}}, Backends: hosts}); err != nil {
			b.Error(err)
		}
	})
	return srv, c, hosts
}
