// Package bench holds Portside's side-by-side benchmarks: Portside's
// controllers and upstream k8s.io/cloud-provider's, on the same real
// kube-apiserver and the same local cloud, in one run.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	code := testenv.Run(m)
	// The memory harness builds portside once per test binary; remove it.
	testbin.Cleanup()
	os.Exit(code)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// unthrottled stands for "no client-side throttling".
const unthrottled = 1e6

// BenchmarkNodeInitialization: N tainted simulated nodes on the real
// apiserver, cloud calls taking 10 ms; time until every node is initialized,
// node writes per node (apiserver's own request counter) and peak RSS, for
// Portside and upstream, at their defaults and at equal settings.
// PORTSIDE_BENCH_NODES sets N (default 5000); PORTSIDE_BENCH_SKIP_SLOW=1
// skips upstream at its defaults (1 worker, QPS 20: about 12 minutes at 5000).
func BenchmarkNodeInitialization(b *testing.B) {
	n := envInt("PORTSIDE_BENCH_NODES", 5000)
	contenders := []contender{
		{Name: "portside-defaults", Workers: 16, QPS: 200, Burst: 400},
		{Name: "upstream-defaults", Upstream: true, Workers: 1, QPS: 20, Burst: 30},
		{Name: "portside-equal", Workers: 10, QPS: unthrottled, Burst: unthrottled},
		{Name: "upstream-equal", Upstream: true, Workers: 10, QPS: unthrottled, Burst: unthrottled},
	}
	if os.Getenv("PORTSIDE_BENCH_SKIP_SLOW") == "1" {
		contenders = slices.DeleteFunc(contenders, func(c contender) bool { return c.Name == "upstream-defaults" })
	}
	results := runNodeInit(b, n, contenders)
	for _, c := range contenders {
		r := results[c.Name]
		b.Logf("%-18s %d nodes in %7.1fs  %.2f API writes/node (nodes and events)  peak RSS %5.1f MB", c.Name, n, r.seconds, r.writesPerNode, r.peakRSSMB)
		b.ReportMetric(r.seconds, c.Name+"-s")
		b.ReportMetric(r.writesPerNode, c.Name+"-writes/node")
		b.ReportMetric(r.peakRSSMB, c.Name+"-peakRSS-MB")
	}
	if u, ok := results["upstream-defaults"]; ok {
		b.ReportMetric(u.seconds/results["portside-defaults"].seconds, "speedup-vs-upstream-defaults")
	}
	b.ReportMetric(results["upstream-equal"].seconds/results["portside-equal"].seconds, "speedup-at-equal-settings")
}

// TestNodeInitializationSmoke runs BenchmarkNodeInitialization's harness
// small (10 nodes), for make test: Portside and upstream at their defaults
// each initialize every node with what the cloud says of its instance
// (providerID, zone, region and instance-type labels, addresses). No
// timing is checked.
func TestNodeInitializationSmoke(t *testing.T) {
	const n = 10
	contenders := []contender{
		{Name: "portside-defaults", Workers: 16, QPS: 200, Burst: 400},
		{Name: "upstream-defaults", Upstream: true, Workers: 1, QPS: 20, Burst: 30},
	}
	results := runNodeInit(t, n, contenders)
	for _, c := range contenders {
		r, ok := results[c.Name]
		if !ok || r.initialized != n || r.correct != n {
			t.Errorf("%s: %d of %d nodes initialized, %d of them as the cloud describes them", c.Name, r.initialized, n, r.correct)
		}
	}
}

// runNodeInit creates n instances in a local cloud whose instance GETs take
// 10 ms, then runs each contender on n fresh tainted nodes of those names.
func runNodeInit(tb testing.TB, n int, contenders []contender) map[string]result {
	// The harness's own watch is protobuf too, to load the apiserver no more
	// than the contenders' informers do.
	cfg := testenv.Config(tb)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client := kubernetes.NewForConfigOrDie(cfg)
	lc := localcloudtest.Start(tb)
	ctx := context.Background()
	cloudCfg := filepath.Join(tb.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		tb.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench-node-%05d", i)
	}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	insts := make(map[string]api.Instance, n)
	var mu sync.Mutex
	var createErr atomic.Value
	workqueue.ParallelizeUntil(ctx, 16, n, func(i int) {
		inst, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: names[i], Zone: zones[i%3]})
		if err != nil {
			createErr.Store(err)
			return
		}
		mu.Lock()
		insts[names[i]] = *inst
		mu.Unlock()
	})
	if err := createErr.Load(); err != nil {
		tb.Fatalf("creating instances: %v", err)
	}
	// Every cloud call takes 10 ms, as a real cloud API's would.
	if err := lc.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "GET", PathPrefix: "/v1/instances", LatencyMillis: 10}}}); err != nil {
		tb.Fatal(err)
	}
	results := map[string]result{}
	for _, c := range contenders {
		c.Kubeconfig, c.CloudConfig = testenv.Kubeconfig(tb), cloudCfg
		results[c.Name] = runContender(tb, client, c, names, insts)
	}
	return results
}

type result struct {
	seconds, writesPerNode, peakRSSMB float64
	// initialized is how many nodes lost the uninitialized taint and got
	// their instance's addresses; correct how many of them carry everything
	// the cloud says of their instance.
	initialized, correct int
}

// runContender registers the nodes, starts the contender, waits until all
// are initialized, checks each against its instance, stops the contender
// and deletes the nodes again.
func runContender(tb testing.TB, client kubernetes.Interface, c contender, names []string, insts map[string]api.Instance) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	specs := make([]nodesim.NodeSpec, len(names))
	for i, name := range names {
		specs[i] = nodesim.NodeSpec{Name: name}
	}
	sim := nodesim.New(client, 32)
	if err := sim.Register(ctx, specs); err != nil {
		tb.Fatal(err)
	}
	var initialized atomic.Int64
	done := make(chan struct{})
	mine := make(map[string]bool, len(names))
	for _, name := range names {
		mine[name] = true
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	// A node counts once it is untainted and carries its instance's
	// addresses: upstream removes the taint in one write and sets the
	// addresses in a second, so the taint alone would stop the clock (and
	// the contender) between the two.
	ready := func(n *corev1.Node) bool {
		if uninitialized(n) {
			return false
		}
		for _, a := range insts[n.Name].Addresses {
			if !slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address}) {
				return false
			}
		}
		return true
	}
	count := func(old, cur *corev1.Node) {
		// Only this run's nodes: other tests of the package share the
		// apiserver.
		was, is := old != nil && ready(old), ready(cur)
		if mine[cur.Name] && is && !was && initialized.Add(1) == int64(len(names)) {
			close(done)
		}
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { count(nil, obj.(*corev1.Node)) },
		UpdateFunc: func(old, cur any) { count(old.(*corev1.Node), cur.(*corev1.Node)) },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	defer func() {
		cancel() // Shutdown waits for the informers, which stop on ctx
		factory.Shutdown()
	}()
	writesBefore := nodeWrites(tb, client)

	spec, _ := json.Marshal(c)
	start := time.Now()
	p, err := proc.Start(c.Name, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, []string{childEnv + "=" + string(spec)},
		filepath.Join(tb.TempDir(), c.Name+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	var peak float64
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	timeout := time.After(passTimeout(len(names)))
wait:
	for {
		select {
		case <-done:
			break wait
		case <-timeout:
			tb.Fatalf("%s: only %d of %d nodes initialized after %v\n%s", c.Name, initialized.Load(), len(names), passTimeout(len(names)), p.LogTail(20))
		case <-p.Done():
			tb.Fatalf("%s exited: %v\n%s", c.Name, p.ExitErr(), p.LogTail(20))
		case <-ticker.C:
			peak = max(peak, peakRSSMB(p.PID()))
		}
	}
	elapsed := time.Since(start)
	peak = max(peak, peakRSSMB(p.PID()))
	p.Stop(10 * time.Second)
	writes := nodeWrites(tb, client) - writesBefore
	correct := checkInitializedNodes(tb, client, c.Name, insts)
	if err := sim.Delete(context.Background(), names); err != nil {
		tb.Fatal(err)
	}
	waitNoNodes(tb, client, names)
	return result{seconds: elapsed.Seconds(), writesPerNode: writes / float64(len(names)), peakRSSMB: peak,
		initialized: int(initialized.Load()), correct: correct}
}

// checkInitializedNodes compares each node with its instance: providerID,
// the zone, region and instance-type labels, and every address. It reports
// the first few differences and returns how many nodes were right.
func checkInitializedNodes(tb testing.TB, client kubernetes.Interface, who string, insts map[string]api.Instance) int {
	list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	correct, reported := 0, 0
	for _, n := range list.Items {
		inst, ok := insts[n.Name]
		if !ok {
			continue
		}
		var wrong []string
		if want := "local://" + inst.ID; n.Spec.ProviderID != want {
			wrong = append(wrong, fmt.Sprintf("providerID %q, want %q", n.Spec.ProviderID, want))
		}
		for k, want := range map[string]string{corev1.LabelTopologyZone: inst.Zone, corev1.LabelTopologyRegion: inst.Region,
			corev1.LabelInstanceTypeStable: inst.Type} {
			if n.Labels[k] != want {
				wrong = append(wrong, fmt.Sprintf("label %s=%q, want %q", k, n.Labels[k], want))
			}
		}
		for _, a := range inst.Addresses {
			if !slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address}) {
				wrong = append(wrong, fmt.Sprintf("no address %s %s (has %v)", a.Type, a.Address, n.Status.Addresses))
			}
		}
		if uninitialized(&n) {
			wrong = append(wrong, "still tainted uninitialized")
		}
		if len(wrong) == 0 {
			correct++
		} else if reported++; reported <= 5 {
			tb.Errorf("%s: node %s: %s", who, n.Name, strings.Join(wrong, "; "))
		}
	}
	return correct
}

// passTimeout bounds a contender's pass over n nodes: 30 minutes at 5,000
// (upstream at its defaults takes about 12), a minute for a smoke test's
// few, so that a broken contender fails it soon.
func passTimeout(n int) time.Duration {
	return min(30*time.Minute, time.Minute+time.Duration(n)*350*time.Millisecond)
}

func uninitialized(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == nodesim.TaintUninitialized {
			return true
		}
	}
	return false
}

// nodeWrites reads the apiserver's own count of writes to nodes (the object
// and its status) and events, so every client's writes are counted the
// same way.
func nodeWrites(tb testing.TB, client kubernetes.Interface) float64 {
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
			!(strings.Contains(line, `resource="nodes"`) || strings.Contains(line, `resource="events"`)) {
			continue
		}
		if !(strings.Contains(line, `verb="PATCH"`) || strings.Contains(line, `verb="PUT"`) ||
			strings.Contains(line, `verb="UPDATE"`) || strings.Contains(line, `verb="POST"`) || strings.Contains(line, `verb="CREATE"`)) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total
}

// peakRSSMB reads a process's peak resident set size (VmHWM).
func peakRSSMB(pid int) float64 { return procStatusMB(pid, "VmHWM:") }

// procStatusMB reads a field in kB of /proc/<pid>/status, in MB (0 when the
// process is gone).
func procStatusMB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// waitNoNodes waits until none of the named nodes exists (other tests'
// nodes may).
func waitNoNodes(tb testing.TB, client kubernetes.Interface, names []string) {
	gone := make(map[string]bool, len(names))
	for _, n := range names {
		gone[n] = true
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
		left := 0
		if err == nil {
			for _, n := range list.Items {
				if gone[n.Name] {
					left++
				}
			}
		}
		if err == nil && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d nodes not deleted after 5 minutes (%v)", left, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
