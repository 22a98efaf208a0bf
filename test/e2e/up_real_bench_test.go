package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/testenv"
)

// BenchmarkUpRealNodes measures the real-node paths users feel:
//   - `portside up --node-mode=real --nodes 3` to ready, cold (a fresh data
//     directory: images built and pushed, machines made) and warm (the
//     same directory again: every machine replaced, caches kept);
//   - each node's idle footprint (PORTSIDE_BENCH_REAL_IDLE_SECONDS, 30):
//     RSS and CPU of its kubelet, containerd and kube-proxy, and of every
//     process in the machine's cgroup, sampled from /proc over the window;
//   - pod start latency, p50 and p99 over 100 pods (the pause image)
//     created at once: from each pod's create call to its Ready seen by a
//     watch (scheduler, kubelet, containerd, CNI, status back);
//   - the load-balancer data plane on the real path, an HTTP request per
//     round trip on a kept-alive connection and per new connection,
//     interleaved in one run: directly to a pod, to a node's NodePort
//     (kube-proxy only), through the Service's VIP (the cloud's data plane
//     → NodePort → kube-proxy → pod) and through nginx `stream` doing the
//     data plane's hop (loopback → NodePort), as ratios to direct.
//
// PORTSIDE_BENCH_REAL_PODS (100) and PORTSIDE_BENCH_REAL_REQUESTS (2000)
// set the scale.
func BenchmarkUpRealNodes(b *testing.B) {
	vpctest.RequireRoot(b)
	cfg := realBenchConfig{nodes: 3, pods: envCount("PORTSIDE_BENCH_REAL_PODS", 100),
		requests: envCount("PORTSIDE_BENCH_REAL_REQUESTS", 2000), warm: true, nginx: true,
		bulkBytes: int64(envCount("PORTSIDE_BENCH_REAL_BULK_MB", 64)) << 20,
		idle:      time.Duration(envCount("PORTSIDE_BENCH_REAL_IDLE_SECONDS", 30)) * time.Second}
	for range b.N {
		r := runRealBench(b, cfg)
		b.ReportMetric(r.coldUp.Seconds(), "s-up-cold")
		b.ReportMetric(r.warmUp.Seconds(), "s-up-warm")
		b.ReportMetric(r.coldDemo.Seconds(), "s-demo-answered-cold")
		b.ReportMetric(r.warmDemo.Seconds(), "s-demo-answered-warm")
		b.ReportMetric(ms(percentile(r.podStart, 0.50)), "ms-pod-start-p50")
		b.ReportMetric(ms(percentile(r.podStart, 0.99)), "ms-pod-start-p99")
		b.ReportMetric(percentile(r.podStartServer, 0.50).Seconds(), "s-pod-start-timestamps-p50")
		b.ReportMetric(percentile(r.podStartServer, 0.99).Seconds(), "s-pod-start-timestamps-p99")
		var worstRSS, worstPSS, worstCPU float64
		for _, f := range r.footprints {
			worstRSS, worstCPU = max(worstRSS, float64(f.agentsRSS)/1e6), max(worstCPU, 100*f.agentsCPU)
			worstPSS = max(worstPSS, float64(f.agentsPSS)/1e6)
			b.Logf("node %s idle over %s: kubelet+containerd+kube-proxy %.0f MB RSS (%v), %.0f MB PSS, %.2f %% of a core; all %d processes %.0f MB, %.2f %%",
				f.machine, cfg.idle, float64(f.agentsRSS)/1e6, f.agents, float64(f.agentsPSS)/1e6, 100*f.agentsCPU, f.processes, float64(f.allRSS)/1e6, 100*f.allCPU)
		}
		b.ReportMetric(worstRSS, "MB-node-agents-rss-max")
		b.ReportMetric(worstPSS, "MB-node-agents-pss-max")
		b.ReportMetric(worstCPU, "%core-node-agents-idle-max")
		b.Logf("up with %d real nodes: demo answered cold %.1fs, warm %.1fs; ready (after the demo's scaling) cold %.1fs, warm %.1fs; %d pods started: p50 %.0f ms, p99 %.0f ms",
			cfg.nodes, r.coldDemo.Seconds(), r.warmDemo.Seconds(), r.coldUp.Seconds(), r.warmUp.Seconds(), cfg.pods, ms(percentile(r.podStart, 0.5)), ms(percentile(r.podStart, 0.99)))
		direct := r.paths[0]
		for _, p := range r.paths {
			p50, p99 := percentile(p.roundTrips, 0.50), percentile(p.roundTrips, 0.99)
			b.ReportMetric(us(p50), p.name+"-rt-p50-us")
			b.ReportMetric(us(p99), p.name+"-rt-p99-us")
			b.ReportMetric(p.connsPerSec, p.name+"-conns/s")
			b.ReportMetric(p.mbPerSec, p.name+"-MB/s")
			b.Logf("%-9s round trip p50 %6.0f µs (+%.0f µs over direct) p99 %6.0f µs; new connections %6.0f/s (%.2f× direct); throughput %6.0f MB/s (%.2f× direct)",
				p.name, us(p50), us(p50)-us(percentile(direct.roundTrips, 0.5)), us(p99), p.connsPerSec, p.connsPerSec/direct.connsPerSec,
				p.mbPerSec, p.mbPerSec/direct.mbPerSec)
		}
	}
}

// TestUpRealNodesBenchSmoke runs the benchmark's harness small (1 node, 5
// pods, 20 requests per path, no warm start, no nginx), for make test: every
// pod Ready on the node, and every path answered by the echo pod (the
// harness checks each response). No timing is checked.
func TestUpRealNodesBenchSmoke(t *testing.T) {
	vpctest.RequireRoot(t)
	r := runRealBench(t, realBenchConfig{nodes: 1, pods: 5, requests: 20, bulkBytes: 1 << 20, idle: 2 * time.Second})
	if r.coldDemo <= 0 || r.coldDemo > r.coldUp {
		t.Errorf("demo answered %v after up's start, ready at %v: want an answer before ready", r.coldDemo, r.coldUp)
	}
	if len(r.footprints) != 1 {
		t.Errorf("%d node footprints, want 1", len(r.footprints))
	}
	for _, f := range r.footprints {
		t.Logf("node %s: agents %v, %.2f %% of a core; %d processes, %d bytes", f.machine, f.agents, 100*f.agentsCPU, f.processes, f.allRSS)
		if f.agentsFound != len(nodeAgents) || f.agentsRSS <= 0 || f.allRSS < f.agentsRSS || f.agentsCPU < 0 || f.agentsPSS <= 0 || f.agentsPSS > f.agentsRSS {
			t.Errorf("node %s: agents %v (RSS %d of %d, CPU %.3f): want kubelet, containerd and kube-proxy measured", f.machine, f.agents, f.agentsRSS, f.allRSS, f.agentsCPU)
		}
	}
	if len(r.podStart) != 5 || len(r.podStartServer) != 5 {
		t.Errorf("%d and %d pod start latencies, want 5", len(r.podStart), len(r.podStartServer))
	}
	for _, d := range r.podStartServer {
		if d < 0 || d > 10*time.Minute {
			t.Errorf("pod start by the pods' timestamps %v, want within the 10 minutes waited", d)
		}
	}
	var names []string
	for _, p := range r.paths {
		names = append(names, p.name)
		if len(p.roundTrips) != 20 || p.connsPerSec <= 0 || p.mbPerSec <= 0 {
			t.Errorf("path %s: %d round trips, %.0f connections/s, %.0f MB/s; want 20 and rates", p.name, len(p.roundTrips), p.connsPerSec, p.mbPerSec)
		}
	}
	if want := []string{"direct", "nodeport", "vip", "vip-proxy", "routed"}; !slices.Equal(names, want) {
		t.Errorf("paths %v, want %v", names, want)
	}
}

type realBenchConfig struct {
	nodes, pods, requests int
	// bulkBytes is read per path per round for throughput.
	bulkBytes int64
	// warm stops the first up and measures a second start on the same
	// data directory; nginx adds it as a contender (installing it).
	warm, nginx bool
	// idle is the window of the nodes' idle footprint (0: not measured).
	idle time.Duration
}

type realBenchResult struct {
	// coldUp and warmUp are to up's ready line; coldDemo and warmDemo to
	// the demo's first answer through the VIP (the same run's, by up's
	// own clock).
	coldUp, warmUp, coldDemo, warmDemo time.Duration
	// podStart is create call → Ready seen by a watch; podStartServer the
	// same by the pods' own timestamps (creationTimestamp → the Ready
	// condition's lastTransitionTime), whole seconds.
	podStart, podStartServer []time.Duration
	paths                    []pathResult
	footprints               []nodeFootprint
}

type pathResult struct {
	name        string
	roundTrips  []time.Duration
	connsPerSec float64
	// mbPerSec is one connection's download rate (a mean over rounds).
	mbPerSec float64
}

func runRealBench(tb testing.TB, cfg realBenchConfig) realBenchResult {
	bin, root := testenv.BuildPortside(tb)
	data := filepath.Join(tb.TempDir(), "up")
	var r realBenchResult
	start := func() (stop func()) {
		began := time.Now()
		stop, out := startRealUp(tb, bin, root, data, "--nodes", strconv.Itoa(cfg.nodes))
		answered, err := demoAnswered(out.String())
		if err != nil {
			tb.Fatal(err)
		}
		if r.coldUp == 0 {
			r.coldUp, r.coldDemo = time.Since(began), answered
		} else {
			r.warmUp, r.warmDemo = time.Since(began), answered
		}
		return stop
	}
	stop := start()
	// Whatever fails, nothing of the environment outlives the benchmark.
	tb.Cleanup(func() {
		stop()
		_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
	})
	if cfg.warm {
		stop()
		stop = start()
	}
	// client-go's default 5 QPS would pace the creates: 100 pods "at
	// once" are 100 calls in flight as a controller would make them.
	kcfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(data, "controlplane", "kubeconfig"))
	if err != nil {
		tb.Fatal(err)
	}
	kcfg.QPS, kcfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	if cfg.idle > 0 {
		r.footprints = measureNodeFootprints(tb, data, cfg.idle)
	}
	r.podStart, r.podStartServer = podStartLatencies(tb, client, cfg.pods)
	r.paths = dataPlanePaths(tb, client, cfg)
	return r
}

// podStartLatencies creates n pause pods at once and returns, per pod, the
// time from its create call returning to its Ready seen by a watch; then
// deletes them and waits until they are gone.
func podStartLatencies(tb testing.TB, client kubernetes.Interface, n int) (watched, server []time.Duration) {
	ctx := context.Background()
	w, err := client.CoreV1().Pods("bench").Watch(ctx, metav1.ListOptions{LabelSelector: "bench=start"})
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created := map[string]time.Time{}
	errs := make([]error, n)
	workqueue.ParallelizeUntil(ctx, 10, n, func(i int) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("start-%d", i), Labels: map[string]string{"bench": "start"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: nodeimages.PauseImage}},
				TerminationGracePeriodSeconds: ptr.To(int64(0))}}
		if _, errs[i] = client.CoreV1().Pods("bench").Create(ctx, pod, metav1.CreateOptions{}); errs[i] == nil {
			mu.Lock()
			created[pod.Name] = time.Now()
			mu.Unlock()
		}
	})
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	ready := map[string]time.Time{}
	var byServer []time.Duration
	deadline := time.After(10 * time.Minute)
	for len(ready) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				tb.Fatalf("pod watch closed with %d of %d ready", len(ready), n)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			if _, seen := ready[p.Name]; !seen && podReady(p) {
				ready[p.Name] = time.Now()
				byServer = append(byServer, readySince(p).Sub(p.CreationTimestamp.Time))
			}
		case <-deadline:
			tb.Fatalf("%d of %d pods ready after 10 minutes", len(ready), n)
		}
	}
	var out []time.Duration
	mu.Lock()
	for name, at := range ready {
		// A watch event can beat the create call's return: never negative.
		out = append(out, max(at.Sub(created[name]), 0))
	}
	mu.Unlock()
	slices.Sort(out)
	slices.Sort(byServer)
	if err := client.CoreV1().Pods("bench").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))},
		metav1.ListOptions{LabelSelector: "bench=start"}); err != nil {
		tb.Fatal(err)
	}
	waitUntil(tb, 5*time.Minute, "the start pods gone", func() bool {
		l, err := client.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{LabelSelector: "bench=start"})
		return err == nil && len(l.Items) == 0
	})
	return out, byServer
}

// readySince is when a ready pod's Ready condition became true, by the
// kubelet's clock as the apiserver keeps it (whole seconds).
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// demoLine is up's progress line of the demo's first answer through its
// VIP: "[  12.0s] demo           GET http://…".
var demoLine = regexp.MustCompile(`(?m)^\[\s*([0-9.]+)s\] demo\s+GET http://`)

// demoAnswered is when up's demo was first answered, by up's clock.
func demoAnswered(out string) (time.Duration, error) {
	m := demoLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no demo answer in up's output:\n%s", out)
	}
	secs, err := strconv.ParseFloat(m[1], 64)
	return time.Duration(secs * float64(time.Second)), err
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func envCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func TestDemoAnswered(t *testing.T) {
	tests := []struct {
		out  string
		want time.Duration
		ok   bool
	}{
		{"[   5.5s] nodes          3/3 initialized\n[  12.0s] demo           GET http://198.18.49.2:8080/hostname → 200 OK\n", 12 * time.Second, true},
		{"[ 121.3s] demo           GET http://[fd00::1]:8080/hostname → 200 OK", 121300 * time.Millisecond, true},
		{"[  12.0s] demo           the ccm gave it VIP 198.18.49.2\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := demoAnswered(tt.out)
		if (err == nil) != tt.ok || (tt.ok && (got-tt.want).Abs() > time.Millisecond) {
			t.Errorf("demoAnswered(%q) = %v, %v; want %v (ok %v)", tt.out, got, err, tt.want, tt.ok)
		}
	}
}
