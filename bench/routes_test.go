package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	n := envInt("PORTSIDE_BENCH_ROUTE_NODES", 5000)
	steady := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("PORTSIDE_BENCH_ROUTE_STEADY")); err == nil && d > 0 {
		steady = d
	}
	cfg := testenv.Config(b)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = unthrottled, unthrottled
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	specs := make([]nodesim.NodeSpec, n)
	for i := range specs {
		// 10.64.0.0/10 holds 16384 /24s.
		specs[i] = nodesim.NodeSpec{Name: fmt.Sprintf("route-node-%05d", i), PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)}}
	}
	type side struct {
		c     contender
		cloud *localcloudtest.Cloud
	}
	sides := []*side{
		{c: contender{Name: "portside-defaults", Controller: "route", Workers: 200, QPS: 200, Burst: 400, ClusterName: "bench-portside"}},
		{c: contender{Name: "upstream-defaults", Controller: "route", Upstream: true, QPS: 20, Burst: 30, ClusterName: "bench-upstream"}},
		// Upstream's alpha alternative (KEP-5237): reconciles on node events,
		// at most every 10 s.
		{c: contender{Name: "upstream-watch", Controller: "route", Upstream: true, QPS: 20, Burst: 30, ClusterName: "bench-upstream-watch",
			FeatureGates: "CloudControllerManagerWatchBasedRoutesReconciliation=true"}},
	}
	for _, s := range sides {
		s.cloud = localcloudtest.Start(b)
		var createErr atomic.Value
		workqueue.ParallelizeUntil(ctx, 16, n, func(i int) {
			if _, err := s.cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: specs[i].Name, Zone: "zone-a"}); err != nil {
				createErr.Store(err)
			}
		})
		if err := createErr.Load(); err != nil {
			b.Fatalf("creating instances: %v", err)
		}
		if err := s.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "*", PathPrefix: "/v1/routes", LatencyMillis: 10}}}); err != nil {
			b.Fatal(err)
		}
		cloudCfg := filepath.Join(b.TempDir(), s.c.Name+".yaml")
		if err := os.WriteFile(cloudCfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", s.cloud.Endpoint, s.cloud.Token), 0o600); err != nil {
			b.Fatal(err)
		}
		s.c.Kubeconfig, s.c.CloudConfig, s.c.ClusterCIDR = testenv.Kubeconfig(b), cloudCfg, benchClusterCIDR
	}
	sim := nodesim.New(client, 32)
	if err := sim.Register(ctx, specs); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = sim.Delete(context.Background(), sim.Names())
		waitNoNodes(b, client)
	}()

	// Time to all routes: one contender at a time, on nodes without the
	// condition (a running route controller would put it back).
	for _, s := range sides {
		clearNetworkConditions(b, client, specs)
		p, routesAt, condAt := runRouteContender(b, client, s.c, s.cloud, n)
		p.Stop(10 * time.Second)
		b.Logf("%-18s %d nodes: all routes in %6.1fs, all NetworkUnavailable=False in %6.1fs", s.c.Name, n, routesAt.Seconds(), condAt.Seconds())
		b.ReportMetric(routesAt.Seconds(), s.c.Name+"-routes-s")
		b.ReportMetric(condAt.Seconds(), s.c.Name+"-conditions-s")
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
			filepath.Join(b.TempDir(), s.c.Name+"-steady.log"))
		if err != nil {
			b.Fatal(err)
		}
		running = append(running, p)
	}
	time.Sleep(20 * time.Second)
	before := make([]int64, len(sides))
	for i, s := range sides {
		before[i] = totalCalls(s.cloud)
	}
	writesBefore := nodeWrites(b, client)
	b.Logf("steady state: all controllers running for %v", steady)
	time.Sleep(steady)
	for i, p := range running {
		select {
		case <-p.Done():
			b.Fatalf("%s exited during the steady state: %v\n%s", sides[i].c.Name, p.ExitErr(), p.LogTail(20))
		default:
		}
	}
	calls := make([]float64, len(sides))
	for i, s := range sides {
		calls[i] = float64(totalCalls(s.cloud) - before[i])
		b.Logf("%-18s %.0f cloud calls in %v of steady state", s.c.Name, calls[i], steady)
		b.ReportMetric(calls[i], s.c.Name+"-steady-calls")
	}
	b.Logf("node and event writes by all in steady state: %.0f", nodeWrites(b, client)-writesBefore)
	if calls[0] > 0 {
		b.ReportMetric(calls[1]/calls[0], "fewer-calls-than-upstream")
	}

	// Churn: every 10 s one node joins and one leaves; the calls each
	// controller makes for it (the new node's route, the old one's delete)
	// and around it.
	churn := 2 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("PORTSIDE_BENCH_ROUTE_CHURN")); err == nil && d > 0 {
		churn = d
	}
	for i, s := range sides {
		before[i] = totalCalls(s.cloud)
	}
	changes := 0
	for next := n; time.Duration(changes)*10*time.Second < churn; next++ {
		spec := nodesim.NodeSpec{Name: fmt.Sprintf("route-node-%05d", next), PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 64+next/256, next%256)}}
		for _, s := range sides {
			if _, err := s.cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: spec.Name, Zone: "zone-a"}); err != nil {
				b.Fatal(err)
			}
		}
		if err := sim.Register(ctx, []nodesim.NodeSpec{spec}); err != nil {
			b.Fatal(err)
		}
		if err := sim.Delete(ctx, []string{specs[changes].Name}); err != nil {
			b.Fatal(err)
		}
		changes++
		time.Sleep(10 * time.Second)
	}
	time.Sleep(20 * time.Second)
	for i, s := range sides {
		c := float64(totalCalls(s.cloud) - before[i])
		// The harness's own instance creates are not the controller's.
		c -= float64(changes)
		b.Logf("%-18s %.0f cloud calls for %d nodes joining and %d leaving over %v", s.c.Name, c, changes, changes, time.Duration(changes)*10*time.Second)
		b.ReportMetric(c, s.c.Name+"-churn-calls")
		if got := s.cloud.Server.RouteCount(); got != n {
			b.Errorf("%s: %d routes after churn, want %d", s.c.Name, got, n)
		}
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
func runRouteContender(b *testing.B, client kubernetes.Interface, c contender, lc *localcloudtest.Cloud, n int) (*proc.Process, time.Duration, time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready atomic.Int64
	condDone := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	count := func(old, cur *corev1.Node) {
		if routed(cur) && (old == nil || !routed(old)) && ready.Add(1) == int64(n) {
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
	timeout := time.After(30 * time.Minute)
	for routesAt == 0 || condAt == 0 {
		select {
		case <-condDone:
			condAt, condDone = time.Since(start), nil
		case <-timeout:
			p.Stop(5 * time.Second)
			b.Fatalf("%s: not done after 30 minutes (%d conditions)\n%s", c.Name, ready.Load(), p.LogTail(20))
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
func clearNetworkConditions(b *testing.B, client kubernetes.Interface, specs []nodesim.NodeSpec) {
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
