package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// BenchmarkCCMMemory: peak RSS of the whole CCM (`portside ccm` and
// upstream's own cloud-controller-manager, test/upstreamccm, both at their
// defaults with the same flags) on a cluster of real-size objects: N Nodes
// as a kubelet writes them (images, nodeInfo, every condition; about 12 KB
// each) and S LoadBalancer Services as `kubectl apply` leaves them
// (last-applied copy, managedFields, Helm labels). The cluster is converged
// first (nodes initialized, every Service with its load balancer), then each
// contender runs alone from a cold start until it has made its startup
// pass (no load-balancer write for a while) and its peak is read (VmHWM).
//
// All but PORTSIDE_BENCH_MEM_LB_NODES (10) nodes carry the exclusion label:
// both CCMs still cache every node, but a load balancer has 10 backends,
// not 5,000 (50 million backends would measure the cloud, not the CCM).
// PORTSIDE_BENCH_MEM_NODES (5000) and PORTSIDE_BENCH_MEM_SERVICES (10000)
// set the scale.
func BenchmarkCCMMemory(b *testing.B) {
	res := runMemory(b, memConfig{
		nodes: envInt("PORTSIDE_BENCH_MEM_NODES", 5000), services: envInt("PORTSIDE_BENCH_MEM_SERVICES", 10000),
		lbNodes: envInt("PORTSIDE_BENCH_MEM_LB_NODES", 10), quiet: 15 * time.Second, minRun: 30 * time.Second,
	})
	for _, r := range res {
		b.ReportMetric(r.peakMB, r.name+"-peakRSS-MB")
		b.ReportMetric(r.endMB, r.name+"-endRSS-MB")
	}
	if len(res) == 2 && res[1].peakMB > 0 {
		b.ReportMetric(res[0].peakMB/res[1].peakMB, "portside/upstream-peakRSS")
	}
}

// TestCCMMemorySmoke runs the memory benchmark's harness at a tiny scale:
// both contenders start on converged real-size objects, each ensures every
// Service's load balancer again (a CCM that never synced would hold the
// least memory: its peak means nothing without its work) and leaves them
// converged. No figure is asserted.
func TestCCMMemorySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both CCMs")
	}
	const services = 30
	res := runMemory(t, memConfig{nodes: 20, services: services, lbNodes: 3, quiet: 2 * time.Second, minRun: 3 * time.Second})
	if len(res) != 2 {
		t.Fatalf("%d contenders ran, want 2", len(res))
	}
	for _, r := range res {
		if r.peakMB <= 0 {
			t.Errorf("%s: no peak RSS read", r.name)
		}
		if r.lbWrites < services || r.lbsEnsured != services {
			t.Errorf("%s: %d load-balancer writes, %d of %d load balancers written during its run: want every Service's ensured",
				r.name, r.lbWrites, r.lbsEnsured, services)
		}
	}
}

type memConfig struct {
	nodes, services, lbNodes int
	// A contender's startup pass is over when no load-balancer write came
	// for quiet, and it ran at least minRun.
	quiet, minRun time.Duration
}

type memResult struct {
	name          string
	peakMB, endMB float64
	ran           time.Duration
	lbWrites      int64
	// lbsEnsured is how many of the cloud's load balancers were written
	// (their updatedAt) while the contender ran: it ran alone, so by it.
	lbsEnsured int
}

func runMemory(tb testing.TB, mc memConfig) []memResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A control plane of its own: 10,000 LoadBalancer Services need more
	// NodePorts than the default range's 2,768.
	cp := testenv.StartControlPlane(tb, controlplane.Options{
		ExtraAPIServerArgs: []string{fmt.Sprintf("--service-node-port-range=30000-%d", 30000+mc.services+1000)}})
	cfg := cp.RESTConfig()
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = 2000, 4000
	client := kubernetes.NewForConfigOrDie(cfg)
	lc, stop, err := localcloudtest.StartWithManyVIPs(tb.TempDir(), dataplane.Options{NoHealthChecks: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer stop()
	cloudCfg := filepath.Join(tb.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		tb.Fatal(err)
	}
	bins := memBinaries(tb)

	start := time.Now()
	specs := make([]nodesim.NodeSpec, mc.nodes)
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 16, mc.nodes, func(i int) {
		name := fmt.Sprintf("mem-node-%05d", i)
		inst, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: fmt.Sprintf("zone-%c", 'a'+i%3)})
		if err != nil {
			failed.Store(err)
			return
		}
		specs[i] = nodesim.NodeSpec{Name: name, NodeIPs: []string{inst.Addresses[0].Address}, Realistic: true}
		if i >= mc.lbNodes {
			specs[i].Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "true"}
		}
	})
	if err := failed.Load(); err != nil {
		tb.Fatal(err)
	}
	sim := nodesim.New(client, 32)
	if err := sim.Register(ctx, specs); err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = sim.Delete(context.Background(), sim.Names()) }()
	namespaces, err := createRealisticServices(ctx, client, mc.services)
	defer func() {
		if err := deleteRealisticServices(context.Background(), client, namespaces); err != nil {
			tb.Errorf("cleaning up Services: %v", err)
		}
	}()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d real-size nodes and %d Services created in %.1fs", mc.nodes, mc.services, time.Since(start).Seconds())

	w := watchConverged(ctx, tb, client, namespaces)
	args := func(extra ...string) []string {
		return append([]string{"--cloud-provider=local", "--cloud-config=" + cloudCfg, "--kubeconfig=" + cp.KubeconfigPath,
			"--secure-port=0", "--bind-address=127.0.0.1", "--leader-elect=false",
			"--allocate-node-cidrs=false", "--configure-cloud-routes=false"}, extra...)
	}
	// Converge first with a fast Portside, so that each contender starts on
	// the same steady cluster.
	start = time.Now()
	conv := startMemContender(tb, "converge", bins.portside, append([]string{"ccm"}, args("--kube-api-qps=2000", "--kube-api-burst=4000",
		"--concurrent-service-syncs=32", "--concurrent-node-syncs=32")...))
	w.wait(tb, conv, mc.nodes, mc.services, 20*time.Minute)
	conv.Stop(10 * time.Second)
	tb.Logf("converged (nodes initialized, every Service with its ingress) in %.1fs", time.Since(start).Seconds())

	contenders := []struct{ name, bin string }{{"portside-defaults", bins.portside}, {"upstream-defaults", bins.upstream}}
	var out []memResult
	for _, c := range contenders {
		a := args()
		if c.name == "portside-defaults" {
			a = append([]string{"ccm"}, a...)
		}
		r := runMemContender(tb, lc, c.name, c.bin, a, mc)
		// It must leave the cluster as converged as it found it, having
		// done its startup pass: every Service's load balancer ensured
		// again, as both CCMs do (a contender that skipped it would hold
		// less and "win").
		w.wait(tb, nil, mc.nodes, mc.services, time.Minute)
		if r.lbWrites < int64(mc.services) || r.lbsEnsured != mc.services {
			tb.Errorf("%s: %d load-balancer writes, %d of %d load balancers written during its run", c.name, r.lbWrites, r.lbsEnsured, mc.services)
		}
		out = append(out, r)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "CCM memory, %d real-size nodes × %d LoadBalancer Services (load %s):\n", mc.nodes, mc.services, loadAvg())
	fmt.Fprintf(&sb, "%-18s %10s %10s %8s %12s %12s\n", "contender", "peak RSS", "end RSS", "ran", "LB writes", "LBs written")
	for _, r := range out {
		fmt.Fprintf(&sb, "%-18s %8.1fMB %8.1fMB %7.1fs %12d %12d\n", r.name, r.peakMB, r.endMB, r.ran.Seconds(), r.lbWrites, r.lbsEnsured)
	}
	tb.Log(sb.String())
	return out
}

type memBins struct{ portside, upstream string }

// memBinaries builds portside and upstream's CCM (test/upstreamccm).
func memBinaries(tb testing.TB) memBins {
	root, err := tools.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	up := filepath.Join(tb.TempDir(), "upstreamccm")
	if msg, err := exec.Command("go", "build", "-o", up, filepath.Join(root, "test", "upstreamccm")).CombinedOutput(); err != nil {
		tb.Fatalf("go build test/upstreamccm: %v\n%s", err, msg)
	}
	return memBins{portside: testbin.Portside(tb), upstream: up}
}

func startMemContender(tb testing.TB, name, bin string, args []string) *proc.Process {
	p, err := proc.Start(name, bin, args, nil, filepath.Join(tb.TempDir(), name+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// runMemContender runs one CCM from a cold start until its startup pass is
// over, sampling its peak RSS.
func runMemContender(tb testing.TB, lc *localcloudtest.Cloud, name, bin string, args []string, mc memConfig) memResult {
	before := lbWrites(lc)
	start := time.Now()
	p := startMemContender(tb, name, bin, args)
	defer p.Stop(10 * time.Second)
	last, lastChange := before, start
	var peak float64
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.Done():
			tb.Fatalf("%s exited: %v\n%s", name, p.ExitErr(), p.LogTail(20))
		case <-tick.C:
		}
		peak = max(peak, peakRSSMB(p.PID()))
		if n := lbWrites(lc); n != last {
			last, lastChange = n, time.Now()
		}
		if time.Since(lastChange) >= mc.quiet && time.Since(start) >= mc.minRun {
			break
		}
		if time.Since(start) > 15*time.Minute {
			tb.Fatalf("%s: load-balancer writes still going after 15 minutes (%d)", name, last-before)
		}
	}
	r := memResult{name: name, peakMB: max(peak, peakRSSMB(p.PID())), endMB: rssMB(p.PID()), ran: time.Since(start), lbWrites: last - before}
	lbs, err := lc.Client.ListLoadBalancers(context.Background(), "")
	if err != nil {
		tb.Fatal(err)
	}
	for _, lb := range lbs {
		if !lb.UpdatedAt.Before(start) {
			r.lbsEnsured++
		}
	}
	return r
}

// lbWrites counts the cloud's load-balancer writes (create, update, change
// backends, delete).
func lbWrites(lc *localcloudtest.Cloud) int64 {
	var n int64
	for k, v := range lc.Server.Calls() {
		if strings.Contains(k, "/v1/load-balancers") && !strings.HasPrefix(k, "GET ") {
			n += v
		}
	}
	return n
}

// rssMB reads a process's current resident set size (VmRSS).
func rssMB(pid int) float64 { return procStatusMB(pid, "VmRSS:") }

// convergedWatch counts initialized nodes and Services with an ingress.
// Only this run's objects count (mem-node-*, and Services in its
// namespaces): other tests of the package share the apiserver.
type convergedWatch struct {
	nodes, services cache.Store
	namespaces      map[string]bool
}

func watchConverged(ctx context.Context, tb testing.TB, client kubernetes.Interface, namespaces []string) *convergedWatch {
	f := informers.NewSharedInformerFactory(client, 0)
	w := &convergedWatch{nodes: f.Core().V1().Nodes().Informer().GetStore(), services: f.Core().V1().Services().Informer().GetStore(),
		namespaces: map[string]bool{}}
	for _, ns := range namespaces {
		w.namespaces[ns] = true
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	tb.Cleanup(f.Shutdown)
	return w
}

func (w *convergedWatch) counts() (nodes, services int) {
	for _, o := range w.nodes.List() {
		if n := o.(*corev1.Node); strings.HasPrefix(n.Name, "mem-node-") && !uninitialized(n) {
			nodes++
		}
	}
	for _, o := range w.services.List() {
		if s := o.(*corev1.Service); w.namespaces[s.Namespace] && len(s.Status.LoadBalancer.Ingress) > 0 {
			services++
		}
	}
	return nodes, services
}

// wait until every node is initialized and every Service has its ingress.
func (w *convergedWatch) wait(tb testing.TB, p *proc.Process, nodes, services int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		n, s := w.counts()
		if n == nodes && s == services {
			return
		}
		if time.Now().After(deadline) {
			tail := ""
			if p != nil {
				tail = p.LogTail(20)
			}
			tb.Fatalf("after %v: %d of %d nodes initialized, %d of %d Services with ingress\n%s", timeout, n, nodes, s, services, tail)
		}
		if p != nil {
			select {
			case <-p.Done():
				tb.Fatalf("%v\n%s", p.ExitErr(), p.LogTail(20))
			default:
			}
		}
		time.Sleep(time.Second)
	}
}

// createRealisticServices creates LoadBalancer Services as `kubectl apply`
// of a Helm-style manifest leaves them: labels, annotations, kubectl's
// last-applied copy of the whole object, and the managedFields of its
// field manager; 20 namespaces.
func createRealisticServices(ctx context.Context, client kubernetes.Interface, n int) ([]string, error) {
	// Namespaces of their own, so that runs in one apiserver never meet.
	prefix := fmt.Sprintf("mem-%d", time.Now().UnixNano()%1_000_000)
	var namespaces []string
	for i := range 20 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", prefix, i)}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return namespaces, err
		}
		namespaces = append(namespaces, ns.Name)
	}
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 32, n, func(i int) {
		svc := realisticService(namespaces[i%20], i)
		if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		return namespaces, fmt.Errorf("creating Services: %w", err)
	}
	return namespaces, nil
}
