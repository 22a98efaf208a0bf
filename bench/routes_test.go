package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

const benchClusterCIDR = "10.64.0.0/10"

// BenchmarkRoutes: N nodes with pod CIDRs, a cloud whose route calls take
// 10 ms. Each route controller gets its own cloud (the same instances);
// measured: time until all N routes exist and until every node has
// NetworkUnavailable=False, then cloud calls over a steady-state window
// with both controllers running side by side. Portside runs at its
// defaults (event-driven, resync every 5 minutes); upstream's
// k8s.io/cloud-provider route controller at its (a full reconcile every
// 10 s, QPS 20). PORTSIDE_BENCH_ROUTE_NODES sets N (default 5000),
// PORTSIDE_BENCH_ROUTE_STEADY the window (default 10m).
func BenchmarkRoutes(b *testing.B) {
	rc := routeConfig{nodes: envInt("PORTSIDE_BENCH_ROUTE_NODES", 5000), settle: 20 * time.Second, steady: 10 * time.Minute,
		churnEvery: 10 * time.Second, churnSettle: 20 * time.Second, sides: []contender{
			{Name: "portside-defaults", Controller: "route", Workers: 200, QPS: 200, Burst: 400, ClusterName: "bench-portside"},
			{Name: "upstream-defaults", Controller: "route", Upstream: true, QPS: 20, Burst: 30, ClusterName: "bench-upstream"},
			// Upstream's alpha alternative (KEP-5237): reconciles on node events,
			// at most every 10 s.
			{Name: "upstream-watch", Controller: "route", Upstream: true, QPS: 20, Burst: 30, ClusterName: "bench-upstream-watch",
				FeatureGates: "CloudControllerManagerWatchBasedRoutesReconciliation=true"},
		}}
	if d, err := time.ParseDuration(os.Getenv("PORTSIDE_BENCH_ROUTE_STEADY")); err == nil && d > 0 {
		rc.steady = d
	}
	churn := 2 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("PORTSIDE_BENCH_ROUTE_CHURN")); err == nil && d > 0 {
		churn = d
	}
	rc.churn = int((churn + rc.churnEvery - 1) / rc.churnEvery)
	res := runRoutes(b, rc)
	for _, r := range res {
		b.ReportMetric(r.routesAt.Seconds(), r.name+"-routes-s")
		b.ReportMetric(r.condAt.Seconds(), r.name+"-conditions-s")
		b.ReportMetric(r.steadyCalls, r.name+"-steady-calls")
		b.ReportMetric(r.churnCalls, r.name+"-churn-calls")
	}
	if res[0].steadyCalls > 0 {
		b.ReportMetric(res[1].steadyCalls/res[0].steadyCalls, "fewer-calls-than-upstream")
	}
}

// TestRoutesSmoke runs BenchmarkRoutes' harness small (10 nodes, seconds
// of steady state, one node joining and one leaving), Portside and
// upstream at their defaults, for make test: each side's cloud has exactly
// one route per node, to the node's pod CIDR, after the first pass, the
// steady state and the churn. No timing or call count is checked.
func TestRoutesSmoke(t *testing.T) {
	res := runRoutes(t, routeConfig{nodes: 10, settle: time.Second, steady: 2 * time.Second, churn: 1, churnEvery: time.Second,
		sides: []contender{
			{Name: "portside-defaults", Controller: "route", Workers: 200, QPS: 200, Burst: 400, ClusterName: "smoke-portside"},
			{Name: "upstream-defaults", Controller: "route", Upstream: true, QPS: 20, Burst: 30, ClusterName: "smoke-upstream"},
		}})
	for _, r := range res {
		if r.routesAt <= 0 || r.condAt <= 0 {
			t.Errorf("%s: routes at %v, conditions at %v", r.name, r.routesAt, r.condAt)
		}
	}
}

// routeConfig is one run of the routes harness.
type routeConfig struct {
	nodes int
	// settle is the start-up time before the steady state is counted;
	// steady its window.
	settle, steady time.Duration
	// churn nodes join and as many leave, one each churnEvery; calls are
	// counted churnSettle after the last.
	churn                   int
	churnEvery, churnSettle time.Duration
	sides                   []contender
}

type routeResult struct {
	name                    string
	routesAt, condAt        time.Duration
	steadyCalls, churnCalls float64
}

// runRoutes: N nodes with pod CIDRs, a cloud whose route calls take 10 ms,
// for each side. Each side's routes are checked against the nodes (one
// route each, to its pod CIDR, no other) after its first pass, after the
// steady state and after the churn.
func runRoutes(tb testing.TB, rc routeConfig) []routeResult {
	n := rc.nodes
	cfg := testenv.Config(tb)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = unthrottled, unthrottled
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	routeSpec := func(i int) nodesim.NodeSpec {
		// 10.64.0.0/10 holds 16384 /24s.
		return nodesim.NodeSpec{Name: fmt.Sprintf("route-node-%05d", i), PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)}}
	}
	specs := make([]nodesim.NodeSpec, n)
	current := map[string]string{} // node → pod CIDR, of the nodes now present
	for i := range specs {
		specs[i] = routeSpec(i)
		current[specs[i].Name] = specs[i].PodCIDRs[0]
	}
	type side struct {
		c     contender
		cloud *localcloudtest.Cloud
	}
	var sides []*side
	for _, c := range rc.sides {
		s := &side{c: c, cloud: localcloudtest.Start(tb)}
		sides = append(sides, s)
		var createErr atomic.Value
		workqueue.ParallelizeUntil(ctx, 16, n, func(i int) {
			if _, err := s.cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: specs[i].Name, Zone: "zone-a"}); err != nil {
				createErr.Store(err)
			}
		})
		if err := createErr.Load(); err != nil {
			tb.Fatalf("creating instances: %v", err)
		}
		if err := s.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "*", PathPrefix: "/v1/routes", LatencyMillis: 10}}}); err != nil {
			tb.Fatal(err)
		}
		cloudCfg := filepath.Join(tb.TempDir(), s.c.Name+".yaml")
		if err := os.WriteFile(cloudCfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", s.cloud.Endpoint, s.cloud.Token), 0o600); err != nil {
			tb.Fatal(err)
		}
		s.c.Kubeconfig, s.c.CloudConfig, s.c.ClusterCIDR = testenv.Kubeconfig(tb), cloudCfg, benchClusterCIDR
	}
	sim := nodesim.New(client, 32)
	if err := sim.Register(ctx, specs); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		names := sim.Names()
		_ = sim.Delete(context.Background(), names)
		waitNoNodes(tb, client, names)
	}()

	// Time to all routes: one contender at a time, on nodes without the
	// condition (a running route controller would put it back).
	out := make([]routeResult, len(sides))
	for i, s := range sides {
		clearNetworkConditions(tb, client, specs)
		p, routesAt, condAt := runRouteContender(tb, client, s.c, s.cloud, n)
		p.Stop(10 * time.Second)
		tb.Logf("%-18s %d nodes: all routes in %6.1fs, all NetworkUnavailable=False in %6.1fs", s.c.Name, n, routesAt.Seconds(), condAt.Seconds())
		out[i] = routeResult{name: s.c.Name, routesAt: routesAt, condAt: condAt}
		checkRoutes(tb, s.cloud, s.c, current, 0)
	}

	// Steady state: all run side by side on routed nodes; each cloud's
	// calls are counted after a settling time for start-up.
	var running []*proc.Process
	defer func() {
		for _, p := range running {
			p.Stop(10 * time.Second)
		}
	}()
	for _, s := range sides {
		spec, _ := json.Marshal(s.c)
		p, err := proc.Start(s.c.Name, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, []string{childEnv + "=" + string(spec)},
			filepath.Join(tb.TempDir(), s.c.Name+"-steady.log"))
		if err != nil {
			tb.Fatal(err)
		}
		running = append(running, p)
	}
	time.Sleep(rc.settle)
	before := make([]int64, len(sides))
	for i, s := range sides {
		before[i] = totalCalls(s.cloud)
	}
	writesBefore := nodeWrites(tb, client)
	tb.Logf("steady state: all controllers running for %v", rc.steady)
	time.Sleep(rc.steady)
	for i, p := range running {
		select {
		case <-p.Done():
			tb.Fatalf("%s exited during the steady state: %v\n%s", sides[i].c.Name, p.ExitErr(), p.LogTail(20))
		default:
		}
	}
	for i, s := range sides {
		out[i].steadyCalls = float64(totalCalls(s.cloud) - before[i])
		tb.Logf("%-18s %.0f cloud calls in %v of steady state", s.c.Name, out[i].steadyCalls, rc.steady)
	}
	tb.Logf("node and event writes by all in steady state: %.0f", nodeWrites(tb, client)-writesBefore)
	for _, s := range sides {
		checkRoutes(tb, s.cloud, s.c, current, 0)
	}

	// Churn: every churnEvery one node joins and one leaves; the calls each
	// controller makes for it (the new node's route, the old one's delete)
	// and around it.
	for i, s := range sides {
		before[i] = totalCalls(s.cloud)
	}
	for change := range rc.churn {
		spec := routeSpec(n + change)
		for _, s := range sides {
			if _, err := s.cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: spec.Name, Zone: "zone-a"}); err != nil {
				tb.Fatal(err)
			}
		}
		if err := sim.Register(ctx, []nodesim.NodeSpec{spec}); err != nil {
			tb.Fatal(err)
		}
		if err := sim.Delete(ctx, []string{specs[change].Name}); err != nil {
			tb.Fatal(err)
		}
		current[spec.Name] = spec.PodCIDRs[0]
		delete(current, specs[change].Name)
		time.Sleep(rc.churnEvery)
	}
	time.Sleep(rc.churnSettle)
	for i, s := range sides {
		c := float64(totalCalls(s.cloud) - before[i])
		// The harness's own instance creates are not the controller's.
		c -= float64(rc.churn)
		out[i].churnCalls = c
		tb.Logf("%-18s %.0f cloud calls for %d nodes joining and %d leaving over %v", s.c.Name, c, rc.churn, rc.churn, time.Duration(rc.churn)*rc.churnEvery)
	}
	// Upstream's controller reconciles every 10 s: the churn's last change
	// may still be on its way.
	for _, s := range sides {
		checkRoutes(tb, s.cloud, s.c, current, 2*time.Minute)
	}
	return out
}

// checkRoutes waits up to wait for the side's cloud to hold exactly one
// route per node of want (node → pod CIDR), of its cluster, to that CIDR,
// and reports what differs. Its reads count as calls: it is called only
// outside the windows whose calls are counted.
func checkRoutes(tb testing.TB, lc *localcloudtest.Cloud, c contender, want map[string]string, wait time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(wait)
	for {
		var diffs []string
		routes, err := lc.Client.ListRoutes(context.Background(), "")
		if err != nil {
			tb.Fatal(err)
		}
		seen := map[string]bool{}
		for _, r := range routes {
			cidr, ok := want[r.TargetNode]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("route %s to %s for node %s, which is not there", r.Name, r.DestinationCIDR, r.TargetNode))
			case seen[r.TargetNode]:
				diffs = append(diffs, fmt.Sprintf("a second route for node %s (%s)", r.TargetNode, r.DestinationCIDR))
			case r.DestinationCIDR != cidr || r.Cluster != c.ClusterName || r.Blackhole:
				diffs = append(diffs, fmt.Sprintf("route %s for node %s: %s of cluster %q (blackhole %v), want %s of %q",
					r.Name, r.TargetNode, r.DestinationCIDR, r.Cluster, r.Blackhole, cidr, c.ClusterName))
			}
			seen[r.TargetNode] = true
		}
		for node, cidr := range want {
			if !seen[node] {
				diffs = append(diffs, fmt.Sprintf("no route for node %s (%s)", node, cidr))
			}
		}
		if len(diffs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %d routes, %d nodes; %d differences, first: %s", c.Name, len(routes), len(want), len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func totalCalls(lc *localcloudtest.Cloud) int64 {
	var t int64
	for _, v := range lc.Server.Calls() {
		t += v
	}
	return t
}

// runRouteContender starts a contender and returns it, still running, with
// the time until its cloud had n routes and until every node said
// NetworkUnavailable=False.
func runRouteContender(b testing.TB, client kubernetes.Interface, c contender, lc *localcloudtest.Cloud, n int) (*proc.Process, time.Duration, time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready atomic.Int64
	condDone := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	count := func(old, cur *corev1.Node) {
		// Only this run's nodes: other tests of the package share the
		// apiserver.
		if strings.HasPrefix(cur.Name, "route-node-") && routed(cur) && (old == nil || !routed(old)) && ready.Add(1) == int64(n) {
			close(condDone)
		}
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { count(nil, obj.(*corev1.Node)) },
		UpdateFunc: func(old, cur any) { count(old.(*corev1.Node), cur.(*corev1.Node)) },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()

	spec, _ := json.Marshal(c)
	start := time.Now()
	p, err := proc.Start(c.Name, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, []string{childEnv + "=" + string(spec)},
		filepath.Join(b.TempDir(), c.Name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	var routesAt, condAt time.Duration
	timeout := time.After(passTimeout(n))
	for routesAt == 0 || condAt == 0 {
		select {
		case <-condDone:
			condAt, condDone = time.Since(start), nil
		case <-timeout:
			p.Stop(5 * time.Second)
			b.Fatalf("%s: not done after %v (%d routes, %d conditions)\n%s", c.Name, passTimeout(n), lc.Server.RouteCount(), ready.Load(), p.LogTail(20))
		case <-p.Done():
			b.Fatalf("%s exited: %v\n%s", c.Name, p.ExitErr(), p.LogTail(20))
		case <-time.After(100 * time.Millisecond):
			// The harness reads the cloud's store directly: its polls must not
			// count as the contender's calls.
			if routesAt == 0 && lc.Server.RouteCount() >= n {
				routesAt = time.Since(start)
			}
		}
	}
	return p, routesAt, condAt
}

func routed(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

// clearNetworkConditions removes NetworkUnavailable from every node, so the
// next contender starts from nodes no route controller has seen.
func clearNetworkConditions(b testing.TB, client kubernetes.Interface, specs []nodesim.NodeSpec) {
	ctx := context.Background()
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 32, len(specs), func(i int) {
		n, err := client.CoreV1().Nodes().Get(ctx, specs[i].Name, metav1.GetOptions{})
		if err != nil {
			failed.Store(err)
			return
		}
		for j, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable {
				patch := fmt.Appendf(nil, `[{"op":"test","path":"/status/conditions/%d/type","value":"NetworkUnavailable"},{"op":"remove","path":"/status/conditions/%d"}]`, j, j)
				if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
					failed.Store(err)
				}
				return
			}
		}
	})
	if err := failed.Load(); err != nil {
		b.Fatalf("clearing conditions: %v", err)
	}
}
