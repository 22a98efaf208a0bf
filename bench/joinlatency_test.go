package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// joinClusterCIDR holds 65,536 /24s: every node of a run (present and
// arrived, all phases) gets a pod CIDR of its own.
const joinClusterCIDR = "10.0.0.0/8"

// joinClusterName is shared by every contender: they take turns on the
// same cloud and the same routes.
const joinClusterName = "bench-join"

// BenchmarkJoinLatency (issue 19): with PORTSIDE_BENCH_JOIN_PRESENT nodes
// (default 5,000) present, initialized and routed, nodes arrive like
// kubelets at a sustained rate (PORTSIDE_BENCH_JOIN_RATES, default
// "20,50,100" per second) for PORTSIDE_BENCH_JOIN_SECONDS (default 20);
// measured per node: the harness's watch seeing it added → the same watch
// seeing it joined (uninitialized taint gone and NetworkUnavailable=False),
// p50/p99/max, and how many had not joined 60 s after the last arrival.
// Contenders run the cloud node and route controllers together in one
// process: Portside at its defaults, and upstream k8s.io/cloud-provider
// v0.37.2's at its (1 node worker, QPS 20/30 per controller, routes
// reconciled every 10 s; PORTSIDE_BENCH_SKIP_SLOW=1 skips it).
// PORTSIDE_BENCH_JOIN_EQUAL=1 adds both at equal settings (10 node
// workers, unthrottled); PORTSIDE_BENCH_JOIN_ONLY=a,b runs only the
// contenders named. Cloud GETs of instances and route calls take 10 ms.
func BenchmarkJoinLatency(b *testing.B) {
	s := joinSettings{
		present: envInt("PORTSIDE_BENCH_JOIN_PRESENT", 5000),
		window:  time.Duration(envInt("PORTSIDE_BENCH_JOIN_SECONDS", 20)) * time.Second,
		cutoff:  time.Duration(envInt("PORTSIDE_BENCH_JOIN_CUTOFF_SECONDS", 60)) * time.Second,
		rates:   []float64{20, 50, 100},
	}
	if v := os.Getenv("PORTSIDE_BENCH_JOIN_RATES"); v != "" {
		s.rates = nil
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || r <= 0 {
				b.Fatalf("PORTSIDE_BENCH_JOIN_RATES: bad rate %q", f)
			}
			s.rates = append(s.rates, r)
		}
	}
	s.contenders = []contender{portsideJoinDefaults()}
	if os.Getenv("PORTSIDE_BENCH_SKIP_SLOW") != "1" {
		s.contenders = append(s.contenders, contender{Name: "upstream-defaults", Controller: "join", Upstream: true, Workers: 1, QPS: 20, Burst: 30})
	}
	if os.Getenv("PORTSIDE_BENCH_JOIN_EQUAL") == "1" {
		s.contenders = append(s.contenders,
			contender{Name: "portside-equal", Controller: "join", Workers: 10, QPS: unthrottled, Burst: unthrottled},
			contender{Name: "upstream-equal", Controller: "join", Upstream: true, Workers: 10, QPS: unthrottled, Burst: unthrottled})
	}
	if only := os.Getenv("PORTSIDE_BENCH_JOIN_ONLY"); only != "" {
		names := strings.Split(only, ",")
		s.contenders = slices.DeleteFunc(s.contenders, func(c contender) bool { return !slices.Contains(names, c.Name) })
	}
	phases := runJoin(b, s)
	var table strings.Builder
	fmt.Fprintf(&table, "join latency, %d nodes present, arrivals for %v each (watch ADD → taint gone and NetworkUnavailable=False):\n", s.present, s.window)
	fmt.Fprintf(&table, "%-18s %6s %8s %7s %7s %7s %7s %7s %9s %9s %10s %8s %9s  %s\n", "contender", "rate/s", "achieved", "arrived",
		"p50", "p99", "max", "notJoin", "taint-p99", "route-p99", "create-p99", "writes/n", "409s/n", "CPU-s contender/apiserver/etcd/harness+cloud")
	for _, p := range phases {
		fmt.Fprintf(&table, "%-18s %6.0f %8.1f %7d %6.3fs %6.3fs %6.3fs %7d %8.3fs %8.3fs %9.3fs %8.2f %9.2f  %s\n", p.contender, p.rate, p.achieved, p.arrived,
			p.p50.Seconds(), p.p99.Seconds(), p.max.Seconds(), p.notJoined, p.initP99.Seconds(), p.routedP99.Seconds(), p.createP99.Seconds(),
			p.writesPerNode, p.conflictsPerNode, p.cpu)
		key := fmt.Sprintf("%s-%.0f/s", p.contender, p.rate)
		b.ReportMetric(p.p50.Seconds(), key+"-p50-s")
		b.ReportMetric(p.p99.Seconds(), key+"-p99-s")
		b.ReportMetric(float64(p.notJoined), key+"-notjoined")
	}
	b.Log(table.String())
	// The testing package keeps only 10 lines of a benchmark's log.
	fmt.Print(table.String())
}

// TestJoinLatencySmoke runs BenchmarkJoinLatency's harness small, Portside
// only, in `make test`: every arrived node joins and has a latency. No
// timing is asserted.
func TestJoinLatencySmoke(t *testing.T) {
	s := joinSettings{present: 50, window: 2 * time.Second, cutoff: 30 * time.Second, rates: []float64{20},
		contenders: []contender{portsideJoinDefaults()}}
	phases := runJoin(t, s)
	if len(phases) != 1 {
		t.Fatalf("%d phases, want 1", len(phases))
	}
	p := phases[0]
	t.Logf("%+v", p)
	if p.arrived != 40 || p.notJoined != 0 || p.joined != p.arrived || p.p50 <= 0 || p.max < p.p99 || p.p99 < p.p50 {
		t.Errorf("arrived %d, joined %d, not joined %d, p50 %v p99 %v max %v: want 40 arrived, all joined, ordered latencies",
			p.arrived, p.joined, p.notJoined, p.p50, p.p99, p.max)
	}
}

// portsideJoinDefaults is Portside's CCM at its defaults (the manager's
// NewOptions: 16 node workers, 200 route workers, QPS 200/400 shared by
// the controllers).
func portsideJoinDefaults() contender {
	return contender{Name: "portside-defaults", Controller: "join", QPS: 200, Burst: 400}
}

type joinSettings struct {
	present    int
	rates      []float64
	window     time.Duration
	cutoff     time.Duration
	contenders []contender
}

// joinPhase is one contender at one arrival rate.
type joinPhase struct {
	contender          string
	rate, achieved     float64
	arrived, joined    int
	notJoined          int
	p50, p99, max      time.Duration
	createP99          time.Duration
	writesPerNode      float64
	conflictsPerNode   float64
	initP50, initP99   time.Duration // → taint gone
	routedP50          time.Duration // → NetworkUnavailable=False
	routedP99          time.Duration
	cpu                string
	idleWait, syncWait time.Duration
}

// joinWatch is the harness's watch of every node: when it first saw each,
// and when it first saw each joined.
type joinWatch struct {
	mu     sync.Mutex
	added  map[string]time.Time
	joined map[string]time.Time
	// inited and routed are when each half of joining was first seen, to
	// tell which controller bounds the latency.
	inited, routed map[string]time.Time
}

func (w *joinWatch) observe(n *corev1.Node, add bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.added[n.Name]; !ok && add {
		w.added[n.Name] = now
	}
	if _, ok := w.inited[n.Name]; !ok && !uninitialized(n) {
		w.inited[n.Name] = now
	}
	if _, ok := w.routed[n.Name]; !ok && routed(n) {
		w.routed[n.Name] = now
	}
	if _, ok := w.joined[n.Name]; !ok && !uninitialized(n) && routed(n) {
		w.joined[n.Name] = now
	}
}

// count reports how many of names have joined.
func (w *joinWatch) count(names []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := 0
	for _, n := range names {
		if _, ok := w.joined[n]; ok {
			c++
		}
	}
	return c
}

// latencies are added → joined (or → the time in at) of those of names
// that got there.
func (w *joinWatch) latencies(names []string, at map[string]time.Time) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for _, n := range names {
		j, ok := at[n]
		a, ok2 := w.added[n]
		if ok && ok2 {
			out = append(out, j.Sub(a))
		}
	}
	slices.Sort(out)
	return out
}

// trimJoinNode keeps what the harness reads of a node: realistic nodes are
// big, and the harness must not be what slows the machine.
func trimJoinNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}
	out.Spec.Taints = n.Spec.Taints
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason}}
		}
	}
	return out, nil
}

func joinCIDR(i int) []string { return []string{fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)} }

// runJoin sets up the cluster (present nodes initialized and routed by a
// Portside run first), then runs each contender through every rate.
func runJoin(tb testing.TB, s joinSettings) []joinPhase {
	ctx := context.Background()
	cfg := testenv.Config(tb)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = unthrottled, unthrottled
	client := kubernetes.NewForConfigOrDie(cfg)
	cp := testenv.ControlPlane(tb)
	lc := localcloudtest.Start(tb)
	cloudCfg := filepath.Join(tb.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token), 0o600); err != nil {
		tb.Fatal(err)
	}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	present := make([]nodesim.NodeSpec, s.present)
	presentNames := make([]string, s.present)
	for i := range present {
		presentNames[i] = fmt.Sprintf("join-node-%05d", i)
		present[i] = nodesim.NodeSpec{Name: presentNames[i], Realistic: true, PodCIDRs: joinCIDR(i)}
	}
	if _, err := createInstances(ctx, lc, presentNames, zones); err != nil {
		tb.Fatalf("creating instances: %v", err)
	}
	// A real cloud's reads and route calls take 10 ms; the harness's own
	// instance creates and deletes are not slowed.
	if err := lc.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{
		{Method: "GET", PathPrefix: "/v1/instances", LatencyMillis: 10},
		{Method: "*", PathPrefix: "/v1/routes", LatencyMillis: 10},
	}}); err != nil {
		tb.Fatal(err)
	}

	wctx, wcancel := context.WithCancel(ctx)
	w := &joinWatch{added: map[string]time.Time{}, joined: map[string]time.Time{}, inited: map[string]time.Time{}, routed: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimJoinNode))
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj.(*corev1.Node), true) },
		UpdateFunc: func(_, cur any) { w.observe(cur.(*corev1.Node), false) },
	})
	factory.Start(wctx.Done())
	factory.WaitForCacheSync(wctx.Done())
	tb.Cleanup(func() { wcancel(); factory.Shutdown() })

	sim := nodesim.New(client, 32)
	start := time.Now()
	if err := sim.Register(ctx, present); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = deleteJoinNodes(context.Background(), client, presentNames)
	})
	tb.Logf("%d realistic nodes registered in %.1fs", s.present, time.Since(start).Seconds())

	// Initialize and route the present nodes once, with Portside
	// unthrottled, so that every contender starts from a steady cluster.
	setup := contender{Name: "setup", Controller: "join", Workers: 16, QPS: unthrottled, Burst: unthrottled}
	p := startJoinContender(tb, setup, cloudCfg)
	start = time.Now()
	for w.count(presentNames) < s.present || lc.Server.RouteCount() < s.present {
		select {
		case <-p.Done():
			tb.Fatalf("setup exited: %v\n%s", p.ExitErr(), p.LogTail(20))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Since(start) > 15*time.Minute {
			tb.Fatalf("setup: %d of %d nodes joined, %d routes after 15 minutes\n%s", w.count(presentNames), s.present, lc.Server.RouteCount(), p.LogTail(20))
		}
	}
	p.Stop(10 * time.Second)
	tb.Logf("setup: %d nodes initialized and routed in %.1fs", s.present, time.Since(start).Seconds())

	var phases []joinPhase
	next := s.present // next pod CIDR index
	for _, c := range s.contenders {
		p := startJoinContender(tb, c, cloudCfg)
		syncWait, idleWait := waitJoinReady(tb, p, client, lc)
		tb.Logf("%s: informers synced in %.1fs, idle after %.1fs more", c.Name, syncWait.Seconds(), idleWait.Seconds())
		for _, rate := range s.rates {
			ph := runJoinPhase(tb, s, c, p, rate, &next, client, lc, cp.PIDs(), sim, w, zones)
			ph.syncWait, ph.idleWait = syncWait, idleWait
			tb.Logf("%s at %.0f/s: achieved %.1f/s, %d arrived, p50 %.3fs p99 %.3fs max %.3fs, %d not joined after %v; "+
				"taint gone p50/p99 %.3f/%.3fs, routed p50/p99 %.3f/%.3fs; create p99 %.3fs, %.2f node+event writes/node, %.2f node write conflicts/node; CPU-s %s",
				c.Name, rate, ph.achieved, ph.arrived, ph.p50.Seconds(), ph.p99.Seconds(), ph.max.Seconds(), ph.notJoined, s.cutoff,
				ph.initP50.Seconds(), ph.initP99.Seconds(), ph.routedP50.Seconds(), ph.routedP99.Seconds(),
				ph.createP99.Seconds(), ph.writesPerNode, ph.conflictsPerNode, ph.cpu)
			phases = append(phases, ph)
		}
		select {
		case <-p.Done():
			tb.Fatalf("%s exited: %v\n%s", c.Name, p.ExitErr(), p.LogTail(20))
		default:
		}
		p.Stop(10 * time.Second)
	}
	return phases
}

func startJoinContender(tb testing.TB, c contender, cloudCfg string) *proc.Process {
	c.Kubeconfig, c.CloudConfig, c.ClusterCIDR, c.ClusterName = testenv.Kubeconfig(tb), cloudCfg, joinClusterCIDR, joinClusterName
	spec, _ := json.Marshal(c)
	p, err := proc.Start(c.Name, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, []string{childEnv + "=" + string(spec)},
		filepath.Join(tb.TempDir(), c.Name+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// waitJoinReady waits for the contender's informers to sync, then until it
// is idle: no node or event writes and no cloud calls but its periodic
// route list for 3 s (upstream reads every node's instance at start, one
// at a time).
func waitJoinReady(tb testing.TB, p *proc.Process, client kubernetes.Interface, lc *localcloudtest.Cloud) (synced, idle time.Duration) {
	start := time.Now()
	for {
		data, _ := os.ReadFile(p.LogPath)
		if strings.Contains(string(data), childReady) {
			break
		}
		select {
		case <-p.Done():
			tb.Fatalf("%s exited: %v\n%s", p.Name, p.ExitErr(), p.LogTail(20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > 2*time.Minute {
			tb.Fatalf("%s: informers not synced after 2 minutes\n%s", p.Name, p.LogTail(20))
		}
	}
	synced = time.Since(start)
	waitJoinIdle(tb, client, lc, 3*time.Minute)
	return synced, time.Since(start) - synced
}

// waitJoinIdle waits until no node or event writes and no cloud calls but
// route lists happened for 3 s, or gives up after max.
func waitJoinIdle(tb testing.TB, client kubernetes.Interface, lc *localcloudtest.Cloud, limit time.Duration) {
	deadline := time.Now().Add(limit)
	var lastW float64
	var lastC int64 = -1
	quiet := 0
	for time.Now().Before(deadline) {
		wr := apiWrites(tb, client, "nodes", "events")
		c := int64(0)
		for k, v := range lc.Server.Calls() {
			if k != "GET /v1/routes" {
				c += v
			}
		}
		if wr == lastW && c == lastC {
			quiet++
			if quiet >= 3 {
				return
			}
		} else {
			quiet = 0
		}
		lastW, lastC = wr, c
		time.Sleep(time.Second)
	}
	tb.Logf("not idle after %v; going on", limit)
}

func runJoinPhase(tb testing.TB, s joinSettings, c contender, p *proc.Process, rate float64, next *int, client kubernetes.Interface,
	lc *localcloudtest.Cloud, cpPIDs map[string]int, sim *nodesim.Simulator, w *joinWatch, zones []string) joinPhase {
	ctx := context.Background()
	n := int(math.Round(rate * s.window.Seconds()))
	specs := make([]nodesim.NodeSpec, n)
	names := make([]string, n)
	for i := range specs {
		names[i] = fmt.Sprintf("join-%s-%03.0f-%05d", c.Name, rate, i)
		specs[i] = nodesim.NodeSpec{Name: names[i], Realistic: true, PodCIDRs: joinCIDR(*next)}
		*next++
	}
	if *next > 65536 {
		tb.Fatalf("out of pod CIDRs in %s", joinClusterCIDR)
	}
	// The cloud knows each node before its kubelet registers.
	ids, err := createInstances(ctx, lc, names, zones)
	if err != nil {
		tb.Fatalf("creating instances: %v", err)
	}
	writesBefore := apiWrites(tb, client, "nodes", "events")
	cpuBefore := joinCPU(p.PID(), cpPIDs)
	conflictsBefore := apiConflicts(tb, client)

	// Arrivals on an absolute schedule: node i is registered at start +
	// i/rate, each in its own goroutine, so that a slow Create does not
	// delay the next arrival.
	interval := time.Duration(float64(time.Second) / rate)
	created := make([]time.Time, n)
	createTook := make([]time.Duration, n)
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for i := range specs {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := sim.Register(ctx, specs[i:i+1]); err != nil {
				failed.Store(err)
			}
			created[i], createTook[i] = time.Now(), time.Since(t0)
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatalf("registering: %v", err)
	}
	first, last := slices.MinFunc(created, time.Time.Compare), slices.MaxFunc(created, time.Time.Compare)
	achieved := float64(n)
	if n > 1 && last.After(first) {
		achieved = float64(n-1) / last.Sub(first).Seconds()
	}
	cutoff := last.Add(s.cutoff)
	for w.count(names) < n && time.Now().Before(cutoff) {
		select {
		case <-p.Done():
			tb.Fatalf("%s exited: %v\n%s", c.Name, p.ExitErr(), p.LogTail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
	cpuAfter := joinCPU(p.PID(), cpPIDs)
	// The kubelets' own creates are not the contender's.
	writes := apiWrites(tb, client, "nodes", "events") - writesBefore - float64(n)
	lat := w.latencies(names, w.joined)
	initLat, routeLat := w.latencies(names, w.inited), w.latencies(names, w.routed)
	conflicts := apiConflicts(tb, client) - conflictsBefore
	slices.Sort(createTook)
	ph := joinPhase{contender: c.Name, rate: rate, achieved: achieved, arrived: n, joined: len(lat), notJoined: n - len(lat),
		createP99: joinPct(createTook, 0.99), writesPerNode: writes / float64(n), conflictsPerNode: conflicts / float64(n),
		initP50: joinPct(initLat, 0.5), initP99: joinPct(initLat, 0.99), routedP50: joinPct(routeLat, 0.5), routedP99: joinPct(routeLat, 0.99)}
	if len(lat) > 0 {
		ph.p50, ph.p99, ph.max = joinPct(lat, 0.50), joinPct(lat, 0.99), lat[len(lat)-1]
	}
	var cpu []string
	for i := range cpuAfter {
		cpu = append(cpu, fmt.Sprintf("%.1f", cpuAfter[i]-cpuBefore[i]))
	}
	ph.cpu = strings.Join(cpu, "/") + fmt.Sprintf(" in %.0fs", time.Since(start).Seconds())

	// Back to the present nodes alone: the arrived nodes go; the running
	// contender deletes their routes (the harness does after a minute if
	// it has not), then their instances go.
	if err := deleteJoinNodes(ctx, client, names); err != nil {
		tb.Fatalf("deleting nodes: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for lc.Server.RouteCount() > s.present && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if lc.Server.RouteCount() > s.present {
		tb.Logf("%s left %d routes of deleted nodes; deleting them", c.Name, lc.Server.RouteCount()-s.present)
		deleteRoutesOf(tb, lc, names)
	}
	var delErr atomic.Value
	workqueue.ParallelizeUntil(ctx, 32, len(ids), func(i int) {
		if err := lc.Client.DeleteInstance(ctx, ids[i]); err != nil {
			delErr.Store(err)
		}
	})
	if err := delErr.Load(); err != nil {
		tb.Fatalf("deleting instances: %v", err)
	}
	waitJoinIdle(tb, client, lc, time.Minute)
	return ph
}

// joinPct is the q-quantile of sorted durations (nearest rank).
func joinPct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func createInstances(ctx context.Context, lc *localcloudtest.Cloud, names, zones []string) ([]string, error) {
	ids := make([]string, len(names))
	var createErr atomic.Value
	workqueue.ParallelizeUntil(ctx, 16, len(names), func(i int) {
		inst, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: names[i], Zone: zones[i%len(zones)]})
		if err != nil {
			createErr.Store(err)
			return
		}
		ids[i] = inst.ID
	})
	if err, _ := createErr.Load().(error); err != nil {
		return nil, err
	}
	return ids, nil
}

// deleteJoinNodes deletes nodes and their Leases (no garbage collector
// runs here) and waits until they are gone.
func deleteJoinNodes(ctx context.Context, client kubernetes.Interface, names []string) error {
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 32, len(names), func(i int) {
		if err := client.CoreV1().Nodes().Delete(ctx, names[i], metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			failed.Store(err)
		}
		if err := client.CoordinationV1().Leases(nodesim.NodeLeaseNamespace).Delete(ctx, names[i], metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}

func deleteRoutesOf(tb testing.TB, lc *localcloudtest.Cloud, names []string) {
	ctx := context.Background()
	routes, err := lc.Client.ListRoutes(ctx, joinClusterName)
	if err != nil {
		tb.Fatal(err)
	}
	gone := map[string]bool{}
	for _, n := range names {
		gone[n] = true
	}
	var stale []api.Route
	for _, r := range routes {
		if gone[r.TargetNode] {
			stale = append(stale, r)
		}
	}
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 32, len(stale), func(i int) {
		if err := lc.Client.DeleteRoute(ctx, stale[i].Name); err != nil {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
}

// joinCPU is the CPU seconds used so far by the contender, kube-apiserver,
// etcd and this process (the harness and the in-process cloud).
func joinCPU(contenderPID int, cpPIDs map[string]int) []float64 {
	return []float64{cpuSeconds(contenderPID), cpuSeconds(cpPIDs["kube-apiserver"]), cpuSeconds(cpPIDs["etcd"]), cpuSeconds(os.Getpid())}
}

// cpuSeconds reads utime+stime of a process from /proc (clock ticks of 100 Hz).
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// apiWrites reads the apiserver's own count of writes to the resources.
func apiWrites(tb testing.TB, client kubernetes.Interface, resources ...string) float64 {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") ||
			!slices.ContainsFunc(resources, func(r string) bool { return strings.Contains(line, `resource="`+r+`"`) }) ||
			!slices.ContainsFunc([]string{"PATCH", "PUT", "UPDATE", "POST", "CREATE"}, func(v string) bool { return strings.Contains(line, `verb="`+v+`"`) }) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total
}

// apiConflicts reads the apiserver's count of node writes it refused with
// 409 Conflict (a write based on a stale resourceVersion).
func apiConflicts(tb testing.TB, client kubernetes.Interface) float64 {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="nodes"`) && strings.Contains(line, `code="409"`) {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				total += v
			}
		}
	}
	return total
}
