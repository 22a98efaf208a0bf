package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// BenchmarkServiceLoadBalancers: S LoadBalancer Services × N nodes, every
// load-balancer call taking 10 ms. Measured per contender: time until every
// Service has its ingress, then time for one added node to reach every load
// balancer, with cloud call counts (and the calls a no-op node update
// causes). PORTSIDE_BENCH_LB_SERVICES (1000) and PORTSIDE_BENCH_LB_NODES
// (500) set the scale; PORTSIDE_BENCH_SKIP_SLOW=1 skips upstream's defaults.
// PORTSIDE_BENCH_LB_ONLY=<name,...> runs only those contenders;
// PORTSIDE_BENCH_LB_WORKERS=<n,...> adds Portside with n service workers.
// PORTSIDE_BENCH_LB_PROFILE=<dir> writes CPU profiles of the second phase
// (one node added): <contender>-cloud.pprof of this process (the cloud,
// its store and data plane, and the probe) and <contender>-contender.pprof
// of the contender.
func BenchmarkServiceLoadBalancers(b *testing.B) {
	nNodes, nSvcs := envInt("PORTSIDE_BENCH_LB_NODES", 500), envInt("PORTSIDE_BENCH_LB_SERVICES", 1000)
	client, lc, sim, specs, cloudCfg := lbSetup(b, nNodes)
	defaults := manager.NewOptions()
	contenders := []contender{
		{Name: "portside-defaults", Controller: "service", Workers: defaults.ConcurrentServiceSyncs, QPS: defaults.KubeAPIQPS, Burst: defaults.KubeAPIBurst},
		{Name: "upstream-defaults", Controller: "service", Upstream: true, Workers: 1, QPS: 20, Burst: 30},
		{Name: "portside-equal", Controller: "service", Workers: 10, QPS: unthrottled, Burst: unthrottled},
		{Name: "upstream-equal", Controller: "service", Upstream: true, Workers: 10, QPS: unthrottled, Burst: unthrottled},
	}
	// PORTSIDE_BENCH_LB_WORKERS=4,32 adds Portside at its defaults but
	// for the number of service workers (portside-w4, portside-w32).
	for _, w := range strings.Split(os.Getenv("PORTSIDE_BENCH_LB_WORKERS"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(w)); err == nil && n > 0 {
			contenders = append(contenders, contender{Name: fmt.Sprintf("portside-w%d", n), Controller: "service", Workers: n,
				QPS: defaults.KubeAPIQPS, Burst: defaults.KubeAPIBurst})
		}
	}
	results := map[string]lbResult{}
	for _, c := range contenders {
		if c.Name == "upstream-defaults" && os.Getenv("PORTSIDE_BENCH_SKIP_SLOW") == "1" {
			continue
		}
		if only := os.Getenv("PORTSIDE_BENCH_LB_ONLY"); only != "" && !slices.Contains(strings.Split(only, ","), c.Name) {
			continue
		}
		c.Kubeconfig, c.CloudConfig = testenv.Kubeconfig(b), cloudCfg
		r := runLBContender(b, client, lc, sim, c, nSvcs, specs[nNodes])
		results[c.Name] = r
		b.Logf("%-18s %d Services × %d nodes: all ingress %6.1fs (%.2f cloud calls/Service); node added → first LB %5.2fs, all LBs %6.2fs (%d cloud calls); no-op node update: %d cloud calls; peak RSS %5.1f MB",
			c.Name, nSvcs, nNodes, r.ingressS, r.ingressCalls, r.firstLBS, r.nodeAddS, r.nodeAddCalls, r.noopCalls, r.peakRSSMB)
		b.ReportMetric(r.ingressS, c.Name+"-ingress-s")
		b.ReportMetric(r.nodeAddS, c.Name+"-nodeadd-s")
		b.ReportMetric(r.ingressCalls, c.Name+"-calls/svc")
		b.ReportMetric(float64(r.nodeAddCalls), c.Name+"-nodeadd-calls")
		b.ReportMetric(float64(r.noopCalls), c.Name+"-noop-calls")
		b.ReportMetric(r.peakRSSMB, c.Name+"-peakRSS-MB")
	}
	if u, ok := results["upstream-defaults"]; ok && results["portside-defaults"].ingressS > 0 {
		b.ReportMetric(u.ingressS/results["portside-defaults"].ingressS, "ingress-speedup-vs-upstream-defaults")
		b.ReportMetric(u.nodeAddS/results["portside-defaults"].nodeAddS, "nodeadd-speedup-vs-upstream-defaults")
	}
	if u, ok := results["upstream-equal"]; ok && results["portside-equal"].ingressS > 0 {
		b.ReportMetric(u.ingressS/results["portside-equal"].ingressS, "ingress-speedup-at-equal")
		b.ReportMetric(u.nodeAddS/results["portside-equal"].nodeAddS, "nodeadd-speedup-at-equal")
	}
}

// lbSetup starts a local cloud (its load-balancer writes taking 10 ms) and
// registers n nodes, each with its instance; specs[n] is one more node's,
// for the second phase.
func lbSetup(tb testing.TB, nNodes int) (kubernetes.Interface, *localcloudtest.Cloud, *nodesim.Simulator, []nodesim.NodeSpec, string) {
	cfg := testenv.Config(tb)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	lc, stop, err := localcloudtest.StartWith(tb.TempDir(), dataplane.Options{NoHealthChecks: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	cloudCfg := filepath.Join(tb.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		tb.Fatal(err)
	}
	// N nodes plus the one added in the second phase, each with its instance.
	specs := make([]nodesim.NodeSpec, nNodes+1)
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 16, nNodes+1, func(i int) {
		name := fmt.Sprintf("lb-node-%04d", i)
		inst, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
		if err != nil {
			failed.Store(err)
			return
		}
		specs[i] = nodesim.NodeSpec{Name: name, NodeIPs: []string{inst.Addresses[0].Address}}
	})
	if err := failed.Load(); err != nil {
		tb.Fatal(err)
	}
	sim := nodesim.New(client, 32)
	if err := sim.Register(ctx, specs[:nNodes]); err != nil {
		tb.Fatal(err)
	}
	// The nodes go with the test: later tests of the package (or this one
	// again, with -count) must not meet them.
	tb.Cleanup(func() {
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = s.Name
		}
		if err := sim.Delete(context.Background(), names); err != nil {
			tb.Errorf("deleting the nodes: %v", err)
		}
		waitNoNodes(tb, client, names)
	})
	// Every write of a load balancer takes 10 ms, incremental backend
	// changes (PATCH, Portside's provider) as full ones (PUT).
	if err := lc.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{
		{Method: "PUT", PathPrefix: "/v1/load-balancers", LatencyMillis: 10},
		{Method: "PATCH", PathPrefix: "/v1/load-balancers", LatencyMillis: 10},
	}}); err != nil {
		tb.Fatal(err)
	}
	return client, lc, sim, specs, cloudCfg
}

// TestServiceLoadBalancersSmoke is BenchmarkServiceLoadBalancers small
// (20 Services × 10 nodes, Portside at its defaults), for make test: every
// Service gets its ingress with one cloud call, and a node added reaches
// every load balancer with exactly one call each. No timing is checked.
func TestServiceLoadBalancersSmoke(t *testing.T) {
	const nNodes, nSvcs = 10, 20
	client, lc, sim, specs, cloudCfg := lbSetup(t, nNodes)
	defaults := manager.NewOptions()
	c := contender{Name: "portside-defaults", Controller: "service", Workers: defaults.ConcurrentServiceSyncs,
		QPS: defaults.KubeAPIQPS, Burst: defaults.KubeAPIBurst, Kubeconfig: testenv.Kubeconfig(t), CloudConfig: cloudCfg}
	r := runLBContender(t, client, lc, sim, c, nSvcs, specs[nNodes])
	t.Logf("all ingress %.1fs (%.2f calls/Service); node added → all LBs %.2fs (%d calls); no-op node update: %d calls",
		r.ingressS, r.ingressCalls, r.nodeAddS, r.nodeAddCalls, r.noopCalls)
	if r.ingressCalls != 1 {
		t.Errorf("%.2f cloud calls per Service to give each its ingress, want 1", r.ingressCalls)
	}
	if r.nodeAddCalls != nSvcs {
		t.Errorf("the added node took %d cloud calls to reach %d load balancers, want one each", r.nodeAddCalls, nSvcs)
	}
	if r.noopCalls != 0 {
		t.Errorf("a node update that changes no host set made %d cloud calls", r.noopCalls)
	}
}

type lbResult struct {
	ingressS, nodeAddS, ingressCalls, peakRSSMB float64
	nodeAddCalls, noopCalls                     int64
	// firstLBS is when the first load balancer had the added node (to the
	// probe's 10 ms): the delay before the contender's first cloud call.
	firstLBS float64
}

// Profiling of the second phase (PORTSIDE_BENCH_LB_PROFILE).
const (
	lbProfileEnv = "PORTSIDE_BENCH_LB_PROFILE"
	// lbChildProfileEnv is the contender's profile file: SIGUSR1 starts
	// it, SIGUSR2 writes it (then <file>.done).
	lbChildProfileEnv = "PORTSIDE_BENCH_LB_CHILD_PROFILE"
)

func init() {
	path := os.Getenv(lbChildProfileEnv)
	if path == "" || os.Getenv(childEnv) == "" {
		return
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var f *os.File
		for s := range sig {
			switch {
			case s == syscall.SIGUSR1 && f == nil:
				var err error
				if f, err = os.Create(path); err == nil && pprof.StartCPUProfile(f) != nil {
					_ = f.Close()
					f = nil
				}
			case s == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				_ = f.Close()
				f = nil
				_ = os.WriteFile(path+".done", nil, 0o600)
			}
		}
	}()
}

// lbProfile profiles this process and the contender (pid) until the
// returned function is called.
func lbProfile(b testing.TB, dir, name string, pid int) func() {
	f, err := os.Create(filepath.Join(dir, name+"-cloud.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	_ = syscall.Kill(pid, syscall.SIGUSR1)
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		_ = syscall.Kill(pid, syscall.SIGUSR2)
		done := filepath.Join(dir, name+"-contender.pprof.done")
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(done); err == nil {
				break
			}
		}
		b.Logf("CPU profiles of %s's second phase in %s (go tool pprof -top <file>)", name, dir)
	}
}

// logPatchLatencies logs the cloud's own latency of the last backend
// changes (its call log keeps the most recent ones) and when they came.
func logPatchLatencies(b testing.TB, lc *localcloudtest.Cloud, name string, since time.Time) {
	st, err := lc.Server.State(context.Background())
	if err != nil {
		return
	}
	var lat []float64
	var first, last time.Time
	for _, call := range st.Calls {
		if call.Method != "PATCH" || call.Time.Before(since) {
			continue
		}
		lat = append(lat, call.LatencyMillis)
		if first.IsZero() || call.Time.Before(first) {
			first = call.Time
		}
		if call.Time.After(last) {
			last = call.Time
		}
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.Logf("%s: last %d PATCHes, cloud latency p50 %.1f ms, p90 %.1f ms, max %.1f ms; %.0f PATCHes/s",
		name, len(lat), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1], float64(len(lat))/last.Sub(first).Seconds())
}

func lbCalls(lc *localcloudtest.Cloud) int64 {
	var n int64
	for k, v := range lc.Server.Calls() {
		if strings.HasPrefix(k, "PUT /v1/load-balancers") || strings.HasPrefix(k, "PATCH /v1/load-balancers") {
			n += v
		}
	}
	return n
}

func runLBContender(b testing.TB, client kubernetes.Interface, lc *localcloudtest.Cloud, sim *nodesim.Simulator, c contender, nSvcs int, extra nodesim.NodeSpec) lbResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := make([]string, nSvcs)
	for i := range names {
		names[i] = fmt.Sprintf("lb-svc-%04d", i)
	}
	workqueue.ParallelizeUntil(ctx, 32, nSvcs, func(i int) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": names[i]},
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			b.Error(err)
		}
	})
	var withIngress atomic.Int64
	allIngress := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	_, _ = factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Service), cur.(*corev1.Service)
			if len(o.Status.LoadBalancer.Ingress) == 0 && len(n.Status.LoadBalancer.Ingress) > 0 && withIngress.Add(1) == int64(nSvcs) {
				close(allIngress)
			}
		},
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()

	before := lbCalls(lc)
	spec, _ := json.Marshal(c)
	env := []string{childEnv + "=" + string(spec)}
	profDir := os.Getenv(lbProfileEnv)
	if profDir != "" {
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			b.Fatal(err)
		}
		env = append(env, lbChildProfileEnv+"="+filepath.Join(profDir, c.Name+"-contender.pprof"))
	}
	start := time.Now()
	p, err := proc.Start(c.Name, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, env,
		filepath.Join(b.TempDir(), c.Name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	var r lbResult
	watch := func(done <-chan struct{}, what string) {
		timeout := time.After(30 * time.Minute)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.Done():
				b.Fatalf("%s exited: %v\n%s", c.Name, p.ExitErr(), p.LogTail(20))
			case <-timeout:
				b.Fatalf("%s: %s did not happen in 30 minutes", c.Name, what)
			case <-tick.C:
				r.peakRSSMB = max(r.peakRSSMB, peakRSSMB(p.PID()))
			}
		}
	}
	watch(allIngress, "every Service getting its ingress")
	r.ingressS = time.Since(start).Seconds()
	r.ingressCalls = float64(lbCalls(lc)-before) / float64(nSvcs)
	checkLBIngress(b, client, lc, c.Name, names, len(sim.Names()))

	// A node update that changes nothing the load balancers use: no calls.
	time.Sleep(3 * time.Second) // let the last status writes settle
	before = lbCalls(lc)
	patch := []byte(`{"metadata":{"labels":{"bench.portside.io/touched":"` + c.Name + `"}}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lb-node-0000", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	r.noopCalls = lbCalls(lc) - before

	// One node added: time until every load balancer has it.
	before = lbCalls(lc)
	stopProfile := func() {}
	if profDir != "" {
		stopProfile = lbProfile(b, profDir, c.Name, p.PID())
	}
	writesBefore := lc.Server.WriteStats()
	added := time.Now()
	if err := sim.Register(ctx, []nodesim.NodeSpec{extra}); err != nil {
		b.Fatal(err)
	}
	reached := make(chan struct{})
	var firstLB atomic.Int64
	go func() {
		for ctx.Err() == nil {
			all, with, err := lc.Server.LoadBalancersWithBackend("", extra.NodeIPs[0]) // this cloud's are all the contender's
			if err == nil && with > 0 {
				firstLB.CompareAndSwap(0, int64(time.Since(added)))
			}
			if err == nil && all >= nSvcs && with == all {
				close(reached)
				return
			}
			// About 3 ms of CPU a probe at 1,000 load balancers: every 25 ms
			// once the first has it, every 10 ms before.
			if firstLB.Load() == 0 {
				time.Sleep(10 * time.Millisecond)
			} else {
				time.Sleep(25 * time.Millisecond)
			}
		}
	}()
	watch(reached, "the added node reaching every load balancer")
	r.nodeAddS = time.Since(added).Seconds()
	r.firstLBS = time.Duration(firstLB.Load()).Seconds()
	stopProfile()
	if profDir != "" {
		logPatchLatencies(b, lc, c.Name, added)
		w := lc.Server.WriteStats()
		commits := max(w.Commits-writesBefore.Commits, 1)
		b.Logf("%s: cloud store: %d commits, %.1f updates/commit, %.0f µs writing and syncing a commit", c.Name, commits,
			float64(w.Updates-writesBefore.Updates)/float64(commits), float64((w.WriteTime-writesBefore.WriteTime).Microseconds())/float64(commits))
	}
	r.nodeAddCalls = lbCalls(lc) - before
	r.peakRSSMB = max(r.peakRSSMB, peakRSSMB(p.PID()))
	p.Stop(10 * time.Second)

	// Clean up for the next contender: the extra node, the Services (their
	// finalizers first, the contender being gone) and the load balancers.
	if err := sim.Delete(ctx, []string{extra.Name}); err != nil {
		b.Fatal(err)
	}
	workqueue.ParallelizeUntil(ctx, 32, nSvcs, func(i int) {
		_, _ = client.CoreV1().Services("default").Patch(ctx, names[i], types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = client.CoreV1().Services("default").Delete(ctx, names[i], metav1.DeleteOptions{})
	})
	lbs, err := lc.Client.ListLoadBalancers(ctx, "kubernetes")
	if err != nil {
		b.Fatal(err)
	}
	workqueue.ParallelizeUntil(ctx, 16, len(lbs), func(i int) { _ = lc.Client.DeleteLoadBalancer(ctx, lbs[i].Name) })
	for {
		list, err := client.CoreV1().Services("default").List(ctx, metav1.ListOptions{Limit: 2})
		if err == nil && len(list.Items) <= 1 { // the kubernetes Service may exist
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return r
}

// checkLBIngress: the cloud holds one load balancer per Service, each with
// every node as a backend (all different), and the Services' ingress
// addresses are exactly the load balancers' VIPs. Reads (GETs) are not
// counted as the contender's calls (lbCalls counts writes).
func checkLBIngress(tb testing.TB, client kubernetes.Interface, lc *localcloudtest.Cloud, who string, services []string, nodes int) {
	tb.Helper()
	ctx := context.Background()
	lbs, err := lc.Client.ListLoadBalancers(ctx, "")
	if err != nil {
		tb.Fatal(err)
	}
	var vips, ingress []string
	for _, lb := range lbs {
		vips = append(vips, lb.VIPs...)
		addrs := map[string]bool{}
		for _, be := range lb.Backends {
			addrs[be.Address] = true
		}
		if len(lb.Backends) != nodes || len(addrs) != nodes {
			tb.Errorf("%s: load balancer %s has %d backends (%d addresses), want the %d nodes", who, lb.Name, len(lb.Backends), len(addrs), nodes)
		}
	}
	for _, name := range services {
		svc, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ingress = append(ingress, in.IP)
		}
	}
	slices.Sort(vips)
	slices.Sort(ingress)
	if len(lbs) != len(services) || !slices.Equal(vips, ingress) {
		tb.Errorf("%s: %d load balancers for %d Services; VIPs %v, Services' ingress %v", who, len(lbs), len(services), vips, ingress)
	}
}
