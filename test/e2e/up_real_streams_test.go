package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/localcloud/machine"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

// BenchmarkUpRealNodesKubectlStreams measures what kube-apiserver's
// cluster egress carries to real kubelets, through Portside's network
// proxy and through upstream's (apiserver-network-proxy v0.34.0's
// proxy-server and agents, run by `up --network-proxy-binaries` in the
// same places with the same certificates), beside kube-apiserver dialing
// the kubelets itself (`--network-proxy=false`), in one run:
//   - `kubectl port-forward` throughput: one connection reading zeros from
//     a pod's socat through the forwarded local port (client → kubectl →
//     kube-apiserver → proxy-server → the node's agent → kubelet →
//     containerd's stream server → the pod), and the proxy's own CPU
//     (server + the node's agent, /proc) per GiB of it;
//   - `kubectl exec -i … cat` round trips: 64 bytes written to the exec's
//     stdin and read back from its stdout, one at a time, p50 and p99, and
//     the proxy's CPU per round trip;
//   - `kubectl exec … true` whole, p50: kubectl's start, the exec's set-up
//     through the proxy (a new tunnel each), runc and the stream's end.
//
// Each round starts `up` once per contender on one data directory (warm:
// machines replaced, images kept), in an order that rotates between
// rounds, so a slow moment of the machine does not fall on one contender.
// PORTSIDE_BENCH_STREAMS_ROUNDS (3), _MB (64, per read; 3 reads a round),
// _ROUND_TRIPS (1000) and _EXECS (10) set the scale.
func BenchmarkUpRealNodesKubectlStreams(b *testing.B) {
	vpctest.RequireRoot(b)
	cfg := streamsConfig{rounds: envCount("PORTSIDE_BENCH_STREAMS_ROUNDS", 3), reads: 3,
		bulk: int64(envCount("PORTSIDE_BENCH_STREAMS_MB", 64)) << 20, roundTrips: envCount("PORTSIDE_BENCH_STREAMS_ROUND_TRIPS", 1000),
		execs: envCount("PORTSIDE_BENCH_STREAMS_EXECS", 10)}
	for range b.N {
		res := runStreamsBench(b, cfg)
		var up, direct *streamsResult
		for i := range res {
			switch res[i].name {
			case streamsUpstream:
				up = &res[i]
			case streamsDirect:
				direct = &res[i]
			}
		}
		for _, r := range res {
			rt50, rt99, ex50 := percentile(r.roundTrips, 0.5), percentile(r.roundTrips, 0.99), percentile(r.execs, 0.5)
			b.ReportMetric(r.mbPerSec(), r.name+"-port-forward-MB/s")
			b.ReportMetric(us(rt50), r.name+"-exec-rt-p50-us")
			b.ReportMetric(us(rt99), r.name+"-exec-rt-p99-us")
			b.ReportMetric(ms(ex50), r.name+"-exec-true-p50-ms")
			line := fmt.Sprintf("%-9s port-forward %6.1f MB/s; exec round trip p50 %5.0f µs, p99 %5.0f µs; exec true p50 %4.0f ms",
				r.name, r.mbPerSec(), us(rt50), us(rt99), ms(ex50))
			if r.name != streamsDirect {
				b.ReportMetric(r.cpuPerGiB(), r.name+"-proxy-CPU-s/GiB")
				b.ReportMetric(r.cpuPerRoundTrip()*1e3, r.name+"-proxy-CPU-ms/rt")
				line += fmt.Sprintf("; proxy CPU %.2f s/GiB, %.3f ms per round trip", r.cpuPerGiB(), r.cpuPerRoundTrip()*1e3)
			}
			if up != nil && direct != nil && r.name == streamsPortside {
				// What each proxy adds to a round trip, over kube-apiserver
				// dialing the kubelet itself.
				d50, d99 := percentile(direct.roundTrips, 0.5), percentile(direct.roundTrips, 0.99)
				added50 := us(rt50-d50) / us(percentile(up.roundTrips, 0.5)-d50)
				added99 := us(rt99-d99) / us(percentile(up.roundTrips, 0.99)-d99)
				b.ReportMetric(added50, "added-exec-rt-p50-vs-upstream")
				line += fmt.Sprintf("\n          ÷ upstream: port-forward %.2f×, exec round trip p50 %.2f× p99 %.2f× (added over direct: p50 %.2f×, p99 %.2f×), exec true %.2f×, proxy CPU per GiB %.2f×, per round trip %.2f×",
					r.mbPerSec()/up.mbPerSec(), us(rt50)/us(percentile(up.roundTrips, 0.5)), us(rt99)/us(percentile(up.roundTrips, 0.99)),
					added50, added99, ms(ex50)/ms(percentile(up.execs, 0.5)), r.cpuPerGiB()/up.cpuPerGiB(), r.cpuPerRoundTrip()/up.cpuPerRoundTrip())
			}
			b.Log(line)
		}
	}
}

// TestUpRealNodesKubectlStreamsSmoke runs the benchmark's harness small
// (one round, a 16 MiB read, 20 round trips, 2 execs), for make test: each
// contender's port-forward delivered its bytes, every numbered echo came
// back intact and in order, and the streams went through the proxy each
// contender names: its processes (not the other's) spent CPU on the bytes,
// the node's agent counted the echoes' packets towards the kubelet, and
// Portside's server had both agents on portside-link/2. No timing is
// checked.
func TestUpRealNodesKubectlStreamsSmoke(t *testing.T) {
	vpctest.RequireRoot(t)
	// 16 MiB: enough for the proxy's CPU to show in /proc's 10 ms ticks
	// (about 45 ms of Portside's, 130 of upstream's).
	const bulk = 16 << 20
	res := runStreamsBench(t, streamsConfig{rounds: 1, reads: 1, bulk: bulk, roundTrips: 20, execs: 2})
	var names []string
	for _, r := range res {
		names = append(names, r.name)
		var short []string
		for _, p := range r.proxies {
			f := strings.Fields(p)
			short = append(short, strings.Join(f[:min(2, len(f))], " "))
		}
		t.Logf("%s: %d bytes in %v, %d round trips (p50 %v), %d execs, proxy CPU %.3f s, the node agent's DATA packets %d, link agents %d, proxies %q",
			r.name, r.bytes, r.readTime, len(r.roundTrips), percentile(r.roundTrips, 0.5), len(r.execs), r.proxyCPUBulk+r.proxyCPURT, r.agentPackets, r.links, short)
		if r.bytes != bulk || r.readTime <= 0 || len(r.roundTrips) != 20 || len(r.execs) != 2 {
			t.Errorf("%s: %d bytes, %d round trips, %d execs: want 16 MiB, 20 and 2", r.name, r.bytes, len(r.roundTrips), len(r.execs))
		}
		switch r.name {
		case streamsDirect:
			if len(r.proxies) != 0 {
				t.Errorf("direct: proxies %v running, want none", r.proxies)
			}
		default:
			// Each echo's request is at least one DATA packet to the
			// kubelet from the node's agent.
			if r.agentPackets < 20 {
				t.Errorf("%s: the node's agent sent %d DATA packets towards the kubelet over 20 round trips: not through it", r.name, r.agentPackets)
			}
			if want := map[string]int{streamsUpstream: -1, streamsPortside: 2}[r.name]; r.links != want {
				t.Errorf("%s: the server has %d agents on portside-link/2, want %d (-1: upstream's says nothing)", r.name, r.links, want)
			}
			if r.proxyCPUBulk <= 0 {
				t.Errorf("%s: the proxy spent no CPU on 16 MiB of port-forward: not through it", r.name)
			}
			if len(r.proxies) != 2 {
				t.Errorf("%s: proxies %v, want the server and the node's agent", r.name, r.proxies)
			}
			for _, p := range r.proxies {
				if upstream := strings.Contains(p, filepath.Join("bin", "proxy-")); upstream != (r.name == streamsUpstream) {
					t.Errorf("%s: proxy process %s: upstream's binary %v, want %v", r.name, p, upstream, r.name == streamsUpstream)
				}
			}
		}
	}
	if want := []string{streamsDirect, streamsUpstream, streamsPortside}; !slices.Equal(names, want) {
		t.Errorf("contenders %v, want %v", names, want)
	}
}

const (
	streamsDirect   = "direct"
	streamsUpstream = "upstream"
	streamsPortside = "portside"
)

type streamsConfig struct {
	rounds, reads, roundTrips, execs int
	bulk                             int64
}

// streamsResult is one contender's, summed over the rounds.
type streamsResult struct {
	name string
	// bytes read through port-forward in readTime; the proxy's CPU over
	// those reads and over the round trips.
	bytes                    int64
	readTime                 time.Duration
	proxyCPUBulk, proxyCPURT float64
	roundTrips, execs        []time.Duration
	// proxies are the proxy processes measured (the last round's), by
	// their command lines.
	proxies []string
	// agentPackets is how many DATA packets the node's agent counted
	// towards the kubelet over the round trips (summed over rounds);
	// links the server's agents on portside-link/2 (the last round's; -1
	// where the server does not say: upstream's, or none).
	agentPackets, links int
}

func (r streamsResult) mbPerSec() float64 { return float64(r.bytes) / 1e6 / r.readTime.Seconds() }
func (r streamsResult) cpuPerGiB() float64 {
	return r.proxyCPUBulk / (float64(r.bytes) / (1 << 30))
}
func (r streamsResult) cpuPerRoundTrip() float64 {
	return r.proxyCPURT / float64(len(r.roundTrips))
}

func runStreamsBench(tb testing.TB, cfg streamsConfig) []streamsResult {
	bin, root := testenv.BuildPortside(tb)
	binDir, err := tools.BinDir()
	if err != nil {
		tb.Fatal(err)
	}
	data := filepath.Join(tb.TempDir(), "up")
	tb.Cleanup(func() { _, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput() })
	flags := map[string][]string{
		streamsDirect:   {"--network-proxy=false"},
		streamsUpstream: {"--network-proxy-binaries", binDir},
		streamsPortside: nil,
	}
	order := []string{streamsDirect, streamsUpstream, streamsPortside}
	res := map[string]*streamsResult{}
	for _, name := range order {
		res[name] = &streamsResult{name: name}
	}
	for round := range cfg.rounds {
		for i := range order {
			name := order[(i+round)%len(order)]
			func() {
				// Stopped however the round ends (a Fatal included).
				stop, _ := startRealUp(tb, bin, root, data, append([]string{"--nodes", "1"}, flags[name]...)...)
				defer stop()
				measureStreams(tb, data, binDir, fmt.Sprintf("%s-%d", name, round), cfg, res[name])
			}()
		}
	}
	out := make([]streamsResult, 0, len(order))
	for _, name := range order {
		out = append(out, *res[name])
	}
	return out
}

// startRealUp runs `up` with real nodes on data until ready and returns
// its output and what stops it (down, then up's exit awaited).
func startRealUp(tb testing.TB, bin, root, data string, extra ...string) (stop func(), out *syncBuffer) {
	up, out, done := testenv.StartUp(tb, bin, root, append([]string{"--node-mode=real", "--data-dir", data}, extra...)...)
	return func() {
		_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = up.Process.Kill()
			<-done
		}
	}, out
}

// measureStreams runs one contender's round against a pod of its own
// (name), created and deleted here, and adds to r.
func measureStreams(tb testing.TB, data, binDir, name string, cfg streamsConfig, r *streamsResult) {
	ctx := context.Background()
	client := upClient(tb, data)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "streams-" + name},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(0)), Containers: []corev1.Container{
			{Name: "shell", Image: nodeimages.AgnhostImage, Command: []string{"sleep", "3600"}},
			// Zeros to each connection, as the load-balancer benchmark's.
			{Name: "bulk", Image: nodeimages.AgnhostImage, Command: []string{"socat", "-U", "-b", "131072",
				"TCP-LISTEN:" + strconv.Itoa(bulkPort) + ",fork,reuseaddr", "OPEN:/dev/zero"}}}}}
	if _, err := client.CoreV1().Pods("bench").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		_ = client.CoreV1().Pods("bench").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	}()
	waitUntil(tb, 3*time.Minute, "pod "+pod.Name+" ready", func() bool {
		p, err := client.CoreV1().Pods("bench").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && allContainersReady(p)
	})
	proxies := proxyPIDs(tb, data)
	serverHealth, agentHealth := proxyHealth(tb, data, "node-1")
	r.links = -1
	if serverHealth != "" {
		r.links = metricSum(tb, serverHealth, linkBackends)
	}
	r.proxies = r.proxies[:0]
	for _, pid := range proxies {
		r.proxies = append(r.proxies, cmdline(pid))
	}
	cpu := func() float64 {
		var s float64
		for _, pid := range proxies {
			s += proc.CPUSeconds(pid)
		}
		return s
	}
	kubectl := []string{filepath.Join(binDir, tools.Kubectl), "--kubeconfig=" + filepath.Join(data, "controlplane", "kubeconfig"), "-n", "bench"}
	run := func(args ...string) *exec.Cmd {
		return exec.Command(kubectl[0], append(slices.Clone(kubectl[1:]), args...)...)
	}

	// exec -i cat: 64-byte round trips on one stream.
	ex := run("exec", "-i", pod.Name, "-c", "shell", "--", "cat")
	stdin, err := ex.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := ex.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	exErr := &syncBuffer{}
	ex.Stderr = exErr
	if err := ex.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = ex.Process.Kill(); _ = ex.Wait() }()
	// A stream that stalls fails the round instead of hanging it.
	watchdog := time.AfterFunc(5*time.Minute, func() { _ = ex.Process.Kill() })
	defer watchdog.Stop()
	// Each message is numbered: a byte lost, repeated or reordered on
	// the way shows.
	seq, got := 0, make([]byte, 64)
	echo := func() (time.Duration, error) {
		seq++
		msg := []byte(fmt.Sprintf("%063d\n", seq))
		began := time.Now()
		if _, err := stdin.Write(msg); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(stdout, got); err != nil {
			return 0, err
		}
		if !bytes.Equal(got, msg) {
			return 0, fmt.Errorf("echoed %q, want %q", got, msg)
		}
		return time.Since(began), nil
	}
	for range 10 { // the stream's set-up and the first packets' warm-up
		if _, err := echo(); err != nil {
			tb.Fatalf("kubectl exec -i cat in %s: %v\n%s", pod.Name, err, exErr.String())
		}
	}
	packets := func() int {
		if agentHealth == "" {
			return 0
		}
		return metricSum(tb, agentHealth, agentDataToAgent)
	}
	c0, p0 := cpu(), packets()
	for range cfg.roundTrips {
		d, err := echo()
		if err != nil {
			tb.Fatalf("kubectl exec -i cat in %s: %v\n%s", pod.Name, err, exErr.String())
		}
		r.roundTrips = append(r.roundTrips, d)
	}
	r.proxyCPURT += cpu() - c0
	r.agentPackets += packets() - p0
	_ = stdin.Close()

	// exec true, whole.
	for range cfg.execs {
		began := time.Now()
		if out, err := run("exec", pod.Name, "-c", "shell", "--", "true").CombinedOutput(); err != nil {
			tb.Fatalf("kubectl exec true in %s: %v\n%s", pod.Name, err, out)
		}
		r.execs = append(r.execs, time.Since(began))
	}

	// port-forward last, on one connection: when a reader closes its
	// connection the pod's sender goes on for a second or two, until the
	// close reaches it (kubectl's half-close, then the kubelet's), and
	// would slow whatever came next.
	pf := run("port-forward", "pod/"+pod.Name, ":"+strconv.Itoa(bulkPort))
	pfOut := &syncBuffer{}
	pf.Stdout, pf.Stderr = pfOut, pfOut
	if err := pf.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> ` + strconv.Itoa(bulkPort))
	waitUntil(tb, 30*time.Second, "kubectl port-forward listening", func() bool { return re.MatchString(pfOut.String()) })
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+re.FindStringSubmatch(pfOut.String())[1], 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Minute))
	read := func(n int64) (time.Duration, error) {
		began := time.Now()
		if got, err := io.CopyN(io.Discard, conn, n); err != nil {
			return 0, fmt.Errorf("kubectl port-forward to %s: read %d of %d bytes: %w\n%s", pod.Name, got, n, err, pfOut.String())
		}
		return time.Since(began), nil
	}
	// The first MiB sets up kubectl's stream to the kubelet and fills the
	// windows on the way; it is not measured.
	if _, err := read(1 << 20); err != nil {
		tb.Fatal(err)
	}
	for range cfg.reads {
		c0 := cpu()
		took, err := read(cfg.bulk)
		if err != nil {
			tb.Fatal(err)
		}
		r.proxyCPUBulk += cpu() - c0
		r.bytes += cfg.bulk
		r.readTime += took
	}
}

func allContainersReady(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

// The proxies' own counts, read from their /metrics: the server's agents
// on portside-link/2 (Portside's only), and the DATA packets an agent
// sent towards its destinations (both).
var (
	linkBackends     = regexp.MustCompile(`(?m)^konnectivity_network_proxy_server_portside_link_backends (\d+)`)
	agentDataToAgent = regexp.MustCompile(`(?m)^konnectivity_network_proxy_agent_stream_packets_total\{packet_type="DATA",segment="to_agent"\} (\d+)`)
	agentDialOrData  = regexp.MustCompile(`(?m)^konnectivity_network_proxy_agent_stream_packets_total\{packet_type="(?:DIAL_REQ|DATA)",segment="to_agent"\} (\d+)`)
)

// metricSum sums what re matches on addr's /metrics; -1 when nothing does.
func metricSum(tb testing.TB, addr string, re *regexp.Regexp) int {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		tb.Fatalf("metrics of %s: %v", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	n, found := 0, false
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.Atoi(m[1])
		n, found = n+v, true
	}
	if !found {
		return -1
	}
	return n
}

// proxyHealth is where up's network proxy state says the server and the
// node's agent serve /metrics ("" without the proxy).
func proxyHealth(tb testing.TB, data, node string) (server, agent string) {
	b, err := os.ReadFile(filepath.Join(data, "netproxy", "state.json"))
	if os.IsNotExist(err) {
		return "", ""
	}
	if err != nil {
		tb.Fatal(err)
	}
	var st struct {
		Server struct{ Health string }
		Agents []struct{ ID, Health string }
	}
	if err := json.Unmarshal(b, &st); err != nil {
		tb.Fatal(err)
	}
	for _, a := range st.Agents {
		if a.ID == node {
			agent = a.Health
		}
	}
	if st.Server.Health == "" || agent == "" {
		tb.Fatalf("network proxy state without the server's or %s's agent's health address: %s", node, b)
	}
	return st.Server.Health, agent
}

// proxyPIDs are the network proxy's processes on data's path, by
// identity: the server whose socket is up's (state.json), and the agent in
// the node's machine (its processes, by the machine's record). None
// without the proxy.
func proxyPIDs(tb testing.TB, data string) []int {
	b, err := os.ReadFile(filepath.Join(data, "netproxy", "state.json"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	var st struct{ Server struct{ Socket string } }
	if err := json.Unmarshal(b, &st); err != nil || st.Server.Socket == "" {
		tb.Fatalf("network proxy state %s: %v", b, err)
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && slices.Contains(procArgs(pid), "--uds-name="+st.Server.Socket) {
			pids = append(pids, pid)
		}
	}
	var machines []string
	_ = filepath.WalkDir(data, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "machine.json" {
			machines = append(machines, filepath.Dir(p))
		}
		return nil
	})
	for _, m := range machines {
		mp, err := machine.PIDs(m)
		if err != nil {
			continue // an earlier run's machine, gone
		}
		for _, pid := range mp {
			if slices.ContainsFunc(procArgs(pid), func(a string) bool { return strings.HasPrefix(a, "--agent-identifiers=") }) {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) != 2 {
		tb.Fatalf("network proxy processes %v under %s: want the server and the node's agent", pids, data)
	}
	return pids
}

func procArgs(pid int) []string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func cmdline(pid int) string { return strings.Join(procArgs(pid), " ") }
