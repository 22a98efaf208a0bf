package soak

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
	"github.com/portside-io/portside/pkg/providers/local"
)

var modeFlag = flag.String("soak.mode", "", "soak mode: short (default) or long; overrides $PORTSIDE_SOAK")

// mode is one soak's parameters.
type mode struct {
	name      string
	soak      time.Duration // churn, faults and kills last this long
	killEvery time.Duration // the CCM is SIGKILLed and restarted this often
	// Each cloud request (every /v1 path, every method, CCM and harness
	// alike) is answered 429 with Retry-After with throttleRate, else 500
	// with errorRate: one rule, so the whole share is faultRate().
	throttleRate, errorRate        float64
	retryAfterSeconds              int
	nodesStart, nodesMin, nodesMax int
	svcsStart, svcsMin, svcsMax    int
	nodeEvery, svcEvery            time.Duration // one node / Service operation per tick
	leaseDuration, renewDeadline   time.Duration
	monitorPeriod                  time.Duration // --node-monitor-period
	convergeTimeout                time.Duration
}

func (m mode) faultRate() float64 { return m.throttleRate + (1-m.throttleRate)*m.errorRate }

var modes = map[string]mode{
	// make test: under 90 s with the build and the apiserver start.
	"short": {name: "short", soak: 45 * time.Second, killEvery: 15 * time.Second,
		throttleRate: 0.03, errorRate: 0.07 / 0.97, retryAfterSeconds: 1,
		nodesStart: 5, nodesMin: 3, nodesMax: 8, svcsStart: 6, svcsMin: 3, svcsMax: 10,
		nodeEvery: 2 * time.Second, svcEvery: time.Second,
		leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, monitorPeriod: time.Second,
		convergeTimeout: 60 * time.Second},
	// Issue 18's proof run.
	"long": {name: "long", soak: 10 * time.Minute, killEvery: 2 * time.Minute,
		throttleRate: 0.10, errorRate: 0.20 / 0.90, retryAfterSeconds: 2,
		nodesStart: 10, nodesMin: 6, nodesMax: 16, svcsStart: 15, svcsMin: 8, svcsMax: 25,
		nodeEvery: 3 * time.Second, svcEvery: time.Second,
		leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, monitorPeriod: 2 * time.Second,
		convergeTimeout: 8 * time.Minute},
}

func selectedMode(t *testing.T) mode {
	name := *modeFlag
	if name == "" {
		name = os.Getenv("PORTSIDE_SOAK")
	}
	if name == "" {
		name = "short"
	}
	m, ok := modes[name]
	if !ok {
		t.Fatalf("unknown soak mode %q: want short or long", name)
	}
	if d := os.Getenv("PORTSIDE_SOAK_DURATION"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("PORTSIDE_SOAK_DURATION: %v", err)
		}
		m.soak = v
	}
	return m
}

const (
	runLabel        = "soak.portside.io/run"
	clusterCIDR     = "10.244.0.0/16"
	nodeStateReady  = "ready"
	nodeStateFlap   = "flapping"
	nodeStateRemove = "removing"
)

// ops counts what the harness did.
type ops struct {
	nodesAdded, nodesRemoved, flaps, svcsCreated, svcsDeleted, quickDeletes, kills, unexpectedExits, harnessErrors atomic.Int64
}

type soak struct {
	t      *testing.T
	m      mode
	run    string // unique per test run: names, namespace, cluster, lease
	ns     string
	client kubernetes.Interface
	cloud  *soakCloud
	sim    *nodesim.Simulator
	ops    ops

	mu       sync.Mutex
	nodes    map[string]string // harness view: name -> state
	instIDs  map[string]string // name -> instance ID
	seqNode  int
	seqSvc   int
	wrong    []string // nodes deleted while their instance existed
	observed int      // node deletions observed
}

// TestSoak: see the package comment and docs/reliability.md.
func TestSoak(t *testing.T) {
	m := selectedMode(t)
	client := testenv.Client(t)
	bin := portsideBinary(t)
	started := time.Now()
	s := &soak{t: t, m: m, run: fmt.Sprintf("soak%06d", rand.IntN(1_000_000)), client: client,
		nodes: map[string]string{}, instIDs: map[string]string{}}
	s.ns = s.run
	s.cloud = startCloud(t)
	s.sim = nodesim.New(client, 4)
	ctx := context.Background()

	logDir, err := os.MkdirTemp("", "portside-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("PORTSIDE_SOAK_KEEP_LOGS") != "" {
			t.Logf("keeping the CCM logs in %s (failed: %v)", logDir, t.Failed())
			return
		}
		_ = os.RemoveAll(logDir)
	})
	t.Cleanup(s.cleanupCluster) // runs after the CCM is stopped (cleanups are LIFO)

	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cloudCfg := filepath.Join(logDir, "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", s.cloud.endpoint, s.cloud.token)), 0o600); err != nil {
		t.Fatal(err)
	}

	// Watch node deletions: each must be of a node the harness removed,
	// and whose instance is gone.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = runLabel + "=" + s.run }))
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: s.nodeDeleted})
	informerStop := make(chan struct{})
	factory.Start(informerStop)
	factory.WaitForCacheSync(informerStop)

	// The initial cluster, before the CCM and the faults.
	for range m.nodesStart {
		s.addNode(ctx)
	}
	for range m.svcsStart {
		s.createService(ctx, false)
	}

	// The CCM, under a supervisor that kills it every period.
	sup := &supervisor{s: s, bin: bin, logDir: logDir, cloudCfg: cloudCfg, kubeconfig: testenv.Kubeconfig(t),
		killNow: make(chan struct{}), killed: make(chan struct{}, 1)}
	supCtx, supCancel := context.WithCancel(ctx)
	var killing atomic.Bool
	killing.Store(true)
	supDone := make(chan struct{})
	go func() { defer close(supDone); sup.run(supCtx, &killing) }()
	t.Cleanup(func() {
		supCancel()
		<-supDone
		sup.stop()
		close(informerStop)
		factory.Shutdown()
	})

	// Faults on, churn on.
	rule := api.FaultRule{Method: "*", PathPrefix: "/v1/", ErrorRate: m.errorRate, ThrottleRate: m.throttleRate, RetryAfterSeconds: m.retryAfterSeconds}
	if err := s.cloud.srv.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{rule}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak %s (run %s): %v, CCM SIGKILLed every %v, %.0f %% of cloud requests fail (%.0f %% 429 Retry-After %ds, then %.1f %% 500), nodes %d..%d, Services %d..%d",
		m.name, s.run, m.soak, m.killEvery, 100*m.faultRate(), 100*m.throttleRate, m.retryAfterSeconds, 100*m.errorRate, m.nodesMin, m.nodesMax, m.svcsMin, m.svcsMax)
	churnCtx, churnCancel := context.WithTimeout(ctx, m.soak)
	var churn sync.WaitGroup
	churn.Add(2)
	go func() { defer churn.Done(); s.every(churnCtx, m.nodeEvery, s.nodeOp) }()
	go func() { defer churn.Done(); s.every(churnCtx, m.svcEvery, s.svcOp) }()
	progress := time.NewTicker(time.Minute)
	for waiting := true; waiting; {
		select {
		case <-churnCtx.Done():
			waiting = false
		case <-progress.C:
			req, e500, t429, _ := s.cloud.counts.snapshot()
			t.Logf("soak %v: nodes +%d -%d ~%d, Services +%d -%d, kills %d; CCM cloud requests %d (500: %d, 429: %d)",
				time.Since(started).Round(time.Second), s.ops.nodesAdded.Load(), s.ops.nodesRemoved.Load(), s.ops.flaps.Load(),
				s.ops.svcsCreated.Load(), s.ops.svcsDeleted.Load(), s.ops.kills.Load(), req["ccm"], e500["ccm"], t429["ccm"])
		}
	}
	progress.Stop()

	// Recovery: faults off, kills off (the CCM running now stays), churn
	// stopped; operations in flight (a flap ending Ready, a removal) finish
	// inside the measured convergence time.
	killing.Store(false)
	if err := s.cloud.srv.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	faultsOff := time.Now()
	req, e500, t429, other := s.cloud.counts.snapshot()
	finalKill := os.Getenv("PORTSIDE_SOAK_FINAL_KILL") != ""
	if finalKill {
		// The worst case: the leader dies as the faults stop, so
		// convergence includes a Lease expiry and a cold start.
		select {
		case sup.killNow <- struct{}{}:
			<-sup.killed
			t.Logf("final SIGKILL of the CCM as the faults stopped")
		case <-supDone:
		}
	}
	churnCancel()
	churn.Wait()
	quiet := time.Now()
	t.Logf("churn operations in flight finished %v after the faults stopped", quiet.Sub(faultsOff).Round(10*time.Millisecond))
	var last convergence
	converged := false
	for time.Since(faultsOff) < m.convergeTimeout {
		last = s.check(ctx)
		if last.ok() {
			converged = true
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	convergeTime, afterQuiet := time.Since(faultsOff), time.Since(quiet)
	s.mu.Lock()
	wrong, observed := slices.Clone(s.wrong), s.observed
	s.mu.Unlock()

	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("figures (%s mode): load balancers leaked %d, nodes wrongly deleted %d (of %d node deletions), Services without ingress %d, Services stuck deleting %d, converged=%v in %v after the faults stopped (%v after the last churn operation)",
		m.name, len(last.leaked), len(wrong), observed, len(last.noIngress), len(last.stuckDeleting), converged, convergeTime.Round(10*time.Millisecond), afterQuiet.Round(10*time.Millisecond))
	t.Logf("operations: nodes added %d, removed %d, NotReady flaps %d; Services created %d, deleted %d (%d right after create); CCM SIGKILLs %d, unexpected CCM exits %d; harness errors %d",
		s.ops.nodesAdded.Load(), s.ops.nodesRemoved.Load(), s.ops.flaps.Load(), s.ops.svcsCreated.Load(), s.ops.svcsDeleted.Load(), s.ops.quickDeletes.Load(),
		s.ops.kills.Load(), s.ops.unexpectedExits.Load(), s.ops.harnessErrors.Load())
	t.Logf("cloud during the soak: CCM %d requests, %d injected 500, %d 429; harness %d requests, %d injected 500, %d 429; non-injected 5xx: ccm %d, harness %d",
		req["ccm"], e500["ccm"], t429["ccm"], req["harness"], e500["harness"], t429["harness"], other["ccm"], other["harness"])
	t.Logf("at the end: %d nodes, %d Services, %d load balancers, %d routes; elapsed %v; load average %s",
		last.nodes, last.services, last.lbs, last.routes, time.Since(started).Round(time.Second), strings.TrimSpace(string(load)))

	if len(wrong) > 0 {
		t.Errorf("nodes deleted while their instance existed: %v", wrong)
	}
	if converged {
		s.selfCheck(ctx)
	}
	if !converged {
		t.Errorf("not converged %v after the faults stopped:\n%s", m.convergeTimeout, last.String())
	}
	if n := other["ccm"] + other["harness"]; n > 0 {
		t.Errorf("the cloud answered %d non-injected 5xx during the soak", n)
	}
}

// every runs fn each interval until ctx is done.
func (s *soak) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			wg.Add(1)
			go func() { defer wg.Done(); fn(ctx) }()
		}
	}
}

func (s *soak) harnessError(format string, args ...any) {
	s.ops.harnessErrors.Add(1)
	s.t.Logf("harness: "+format, args...)
}

// nodeOp adds, removes or flaps one node, keeping the count in bounds.
func (s *soak) nodeOp(ctx context.Context) {
	s.mu.Lock()
	live := 0
	for _, st := range s.nodes {
		if st != nodeStateRemove {
			live++
		}
	}
	s.mu.Unlock()
	switch r := rand.Float64(); {
	case live < s.m.nodesMin || (live < s.m.nodesMax && r < 0.35):
		s.addNode(ctx)
	case live > s.m.nodesMin && r < 0.7:
		s.removeNode(ctx)
	default:
		s.flapNode(ctx)
	}
}

// addNode creates an instance and registers its node as a kubelet would.
// Names are never reused, so a deletion names one node for sure.
func (s *soak) addNode(ctx context.Context) {
	s.mu.Lock()
	s.seqNode++
	name := fmt.Sprintf("%s-n%03d", s.run, s.seqNode)
	s.mu.Unlock()
	var inst *api.Instance
	if err := retryCloud(ctx, func() (err error) {
		inst, err = s.cloud.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
		return err
	}); err != nil {
		if ctx.Err() == nil {
			s.harnessError("create instance %s: %v", name, err)
		}
		return
	}
	spec := nodesim.NodeSpec{Name: name, NodeIPs: []string{inst.Addresses[0].Address}, Labels: map[string]string{runLabel: s.run}}
	if err := s.sim.Register(context.Background(), []nodesim.NodeSpec{spec}); err != nil {
		s.harnessError("register node %s: %v", name, err)
		return
	}
	// Only a registered node may be picked for removal or a flap.
	s.mu.Lock()
	s.instIDs[name] = inst.ID
	s.nodes[name] = nodeStateReady
	s.mu.Unlock()
	s.ops.nodesAdded.Add(1)
}

// pick returns a random node in state from, moving it to state to.
func (s *soak) pick(from, to string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n, st := range s.nodes {
		if st == from {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	n := names[rand.IntN(len(names))]
	s.nodes[n] = to
	return n
}

// removeNode is a scale-down: the instance is deleted, then the node goes
// NotReady (its kubelet is gone); the CCM's lifecycle controller must
// delete the Node.
func (s *soak) removeNode(ctx context.Context) {
	name := s.pick(nodeStateReady, nodeStateRemove)
	if name == "" {
		return
	}
	s.mu.Lock()
	id := s.instIDs[name]
	s.mu.Unlock()
	// Not ctx: a half-done removal would leave a Ready node without instance.
	bg, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := retryCloud(bg, func() error {
		err := s.cloud.client.DeleteInstance(bg, id)
		if client.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		s.harnessError("delete instance %s: %v", name, err)
		return
	}
	if err := s.sim.SetReady(bg, name, false); err != nil && !apierrors.IsNotFound(err) {
		s.harnessError("node %s NotReady: %v", name, err)
		return
	}
	s.ops.nodesRemoved.Add(1)
}

// flapNode makes a node NotReady for a few lifecycle periods while its
// instance exists: the trap of issue 18. A failing cloud must not get it
// deleted.
func (s *soak) flapNode(ctx context.Context) {
	name := s.pick(nodeStateReady, nodeStateFlap)
	if name == "" {
		return
	}
	bg := context.Background()
	if err := s.sim.SetReady(bg, name, false); err != nil {
		s.harnessError("node %s NotReady: %v", name, err)
	}
	s.ops.flaps.Add(1)
	time.Sleep(time.Duration(3+rand.IntN(4)) * s.m.monitorPeriod)
	if err := s.sim.SetReady(bg, name, true); err != nil && !apierrors.IsNotFound(err) {
		s.harnessError("node %s Ready: %v", name, err)
	}
	s.mu.Lock()
	if s.nodes[name] == nodeStateFlap {
		s.nodes[name] = nodeStateReady
	}
	s.mu.Unlock()
}

// nodeDeleted checks a Node deletion: the harness must have removed the
// node, and its instance must be gone (read from the cloud's store).
func (s *soak) nodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	instances, _, _ := s.cloud.state(s.t)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observed++
	if st := s.nodes[n.Name]; st != nodeStateRemove || instances[n.Name] {
		s.wrong = append(s.wrong, fmt.Sprintf("%s (harness state %q, instance exists %v)", n.Name, st, instances[n.Name]))
	}
	delete(s.nodes, n.Name)
}

// svcOp creates or deletes one LoadBalancer Service, keeping the count in
// bounds; one create in ten is deleted again within a second.
func (s *soak) svcOp(ctx context.Context) {
	list, err := s.client.CoreV1().Services(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			s.harnessError("list Services: %v", err)
		}
		return
	}
	var live []corev1.Service
	for _, svc := range list.Items {
		if svc.DeletionTimestamp == nil {
			live = append(live, svc)
		}
	}
	r := rand.Float64()
	if len(live) < s.m.svcsMin || (len(live) < s.m.svcsMax && r < 0.5) {
		s.createService(ctx, rand.IntN(10) == 0)
		return
	}
	if len(live) > 0 {
		s.deleteService(live[rand.IntN(len(live))].Name)
	}
}

func (s *soak) createService(ctx context.Context, quickDelete bool) {
	s.mu.Lock()
	s.seqSvc++
	name := fmt.Sprintf("svc-%04d", s.seqSvc)
	s.mu.Unlock()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if _, err := s.client.CoreV1().Services(s.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		if ctx.Err() == nil {
			s.harnessError("create Service %s: %v", name, err)
		}
		return
	}
	s.ops.svcsCreated.Add(1)
	if quickDelete {
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
		s.deleteService(name)
		s.ops.quickDeletes.Add(1)
	}
}

func (s *soak) deleteService(name string) {
	err := s.client.CoreV1().Services(s.ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.harnessError("delete Service %s: %v", name, err)
		return
	}
	s.ops.svcsDeleted.Add(1)
}

// convergence is one look at the cluster and the cloud after the faults.
type convergence struct {
	nodes, services, lbs, routes int
	leaked                       []string // load balancers of this cluster whose Service is gone
	noIngress                    []string // Services without ingress
	stuckDeleting                []string // Services deleted but still there (finalizer)
	badLB                        []string // Services whose load balancer is missing, not active, or has the wrong backends
	pendingNodes                 []string // nodes removed (instance gone) still there; nodes not initialized
	badRoutes                    []string // route differences
	errs                         []string
}

func (c convergence) ok() bool {
	return len(c.leaked)+len(c.noIngress)+len(c.stuckDeleting)+len(c.badLB)+len(c.pendingNodes)+len(c.badRoutes)+len(c.errs) == 0
}

func (c convergence) String() string {
	var b strings.Builder
	for _, f := range []struct {
		what string
		list []string
	}{{"leaked load balancers", c.leaked}, {"Services without ingress", c.noIngress}, {"Services stuck deleting", c.stuckDeleting},
		{"Services with a wrong load balancer", c.badLB}, {"nodes not converged", c.pendingNodes}, {"routes", c.badRoutes}, {"errors", c.errs}} {
		if len(f.list) > 0 {
			fmt.Fprintf(&b, "  %s (%d): %s\n", f.what, len(f.list), strings.Join(f.list, "; "))
		}
	}
	return b.String()
}

// check compares the cluster with the cloud: every Service has ingress and
// a load balancer (found by the local provider's service-uid tag) with
// exactly the cluster's nodes as backends; no load balancer of this cluster
// without its Service; no node left whose instance is gone; routes are the
// nodes' pod CIDRs.
func (s *soak) check(ctx context.Context) (c convergence) {
	nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: runLabel + "=" + s.run})
	if err != nil {
		c.errs = append(c.errs, err.Error())
		return c
	}
	svcs, err := s.client.CoreV1().Services(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.errs = append(c.errs, err.Error())
		return c
	}
	instances, lbs, routes := s.cloud.state(s.t)
	c.nodes, c.services = len(nodes.Items), len(svcs.Items)

	wantBackends := []string{}
	wantRoutes := map[string]bool{}
	for _, n := range nodes.Items {
		if !instances[n.Name] {
			c.pendingNodes = append(c.pendingNodes, n.Name+": instance gone, node still there")
			continue
		}
		if n.Spec.ProviderID == "" || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodesim.TaintUninitialized }) {
			c.pendingNodes = append(c.pendingNodes, n.Name+": not initialized")
		}
		if len(n.Spec.PodCIDRs) == 0 {
			c.pendingNodes = append(c.pendingNodes, n.Name+": no pod CIDR")
		}
		if n.DeletionTimestamp == nil {
			wantBackends = append(wantBackends, n.Name)
		}
		for _, cidr := range n.Spec.PodCIDRs {
			wantRoutes[n.Name+" "+cidr] = true
		}
	}
	sort.Strings(wantBackends)

	byUID := map[types.UID][]api.LoadBalancer{}
	for _, lb := range lbs {
		if lb.Cluster != s.run {
			continue
		}
		c.lbs++
		uid := types.UID(lb.Tags[local.TagServiceUID])
		byUID[uid] = append(byUID[uid], lb)
	}
	live := map[types.UID]bool{}
	for _, svc := range svcs.Items {
		live[svc.UID] = true
		if svc.DeletionTimestamp != nil {
			c.stuckDeleting = append(c.stuckDeleting, svc.Name)
			continue
		}
		if len(svc.Status.LoadBalancer.Ingress) == 0 {
			c.noIngress = append(c.noIngress, svc.Name)
		}
		mine := byUID[svc.UID]
		if len(mine) != 1 {
			c.badLB = append(c.badLB, fmt.Sprintf("%s: %d load balancers", svc.Name, len(mine)))
			continue
		}
		lb := mine[0]
		got := []string{}
		for _, b := range lb.Backends {
			got = append(got, b.Name)
		}
		sort.Strings(got)
		if lb.State != api.LoadBalancerActive || !slices.Equal(got, wantBackends) {
			c.badLB = append(c.badLB, fmt.Sprintf("%s: load balancer %s %s, backends %v, want %v", svc.Name, lb.Name, lb.State, got, wantBackends))
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if !slices.Contains(lb.VIPs, ing.IP) {
				c.badLB = append(c.badLB, fmt.Sprintf("%s: ingress %s not among the VIPs %v", svc.Name, ing.IP, lb.VIPs))
			}
		}
	}
	for uid, l := range byUID {
		if !live[uid] {
			for _, lb := range l {
				c.leaked = append(c.leaked, fmt.Sprintf("%s (%s)", lb.Name, lb.Tags[local.TagServiceName]))
			}
		}
	}

	gotRoutes := map[string]bool{}
	for _, r := range routes {
		if r.Cluster != s.run {
			continue
		}
		c.routes++
		key := r.TargetNode + " " + r.DestinationCIDR
		gotRoutes[key] = true
		if r.Blackhole || !wantRoutes[key] {
			c.badRoutes = append(c.badRoutes, fmt.Sprintf("extra route %s %s blackhole=%v", r.Name, key, r.Blackhole))
		}
	}
	for key := range wantRoutes {
		if !gotRoutes[key] {
			c.badRoutes = append(c.badRoutes, "missing route "+key)
		}
	}
	return c
}

// cleanupCluster removes what the run made in the shared apiserver, so a
// second run (-count=2) starts clean: Services (finalizers stripped: the
// CCM is stopped), the namespace, the nodes.
func (s *soak) cleanupCluster() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if list, err := s.client.CoreV1().Services(s.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, svc := range list.Items {
			_, _ = s.client.CoreV1().Services(s.ns).Patch(ctx, svc.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = s.client.CoreV1().Services(s.ns).Delete(ctx, svc.Name, metav1.DeleteOptions{})
		}
	}
	_ = s.client.CoreV1().Namespaces().Delete(ctx, s.ns, metav1.DeleteOptions{})
	_ = s.client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: runLabel + "=" + s.run})
	_ = s.client.CoordinationV1().Leases("kube-system").Delete(ctx, s.run, metav1.DeleteOptions{})
}

// supervisor runs one `portside ccm` at a time, SIGKILLs it every
// killEvery while killing is on, and restarts it at once with a new
// identity (as a restarted pod); the new process takes the Lease when the
// dead one's expires.
type supervisor struct {
	s                *soak
	bin              string
	logDir, cloudCfg string
	kubeconfig       string

	killNow chan struct{} // a kill on demand (PORTSIDE_SOAK_FINAL_KILL)
	killed  chan struct{}

	mu  sync.Mutex
	cur *proc.Process
	n   int
}

func (sv *supervisor) start() *proc.Process {
	sv.n++
	m := sv.s.m
	id := fmt.Sprintf("ccm-%02d", sv.n)
	args := []string{"ccm", "--cloud-provider=local", "--cloud-config=" + sv.cloudCfg,
		"--kubeconfig=" + sv.kubeconfig, "--secure-port=0", "--bind-address=127.0.0.1", "--webhook-secure-port=0",
		"--cluster-name=" + sv.s.run,
		"--leader-elect=true", "--leader-elect-identity=" + id, "--leader-elect-resource-name=" + sv.s.run,
		"--leader-elect-lease-duration=" + m.leaseDuration.String(), "--leader-elect-renew-deadline=" + m.renewDeadline.String(),
		"--leader-elect-retry-period=500ms",
		"--node-monitor-period=" + m.monitorPeriod.String(),
		"--allocate-node-cidrs", "--cluster-cidr=" + clusterCIDR, "--configure-cloud-routes"}
	p, err := proc.Start(id, sv.bin, args, nil, filepath.Join(sv.logDir, id+".log"))
	if err != nil {
		sv.s.t.Errorf("start the CCM: %v", err)
		return nil
	}
	sv.mu.Lock()
	sv.cur = p
	sv.mu.Unlock()
	return p
}

func (sv *supervisor) run(ctx context.Context, killing *atomic.Bool) {
	p := sv.start()
	if p == nil {
		return
	}
	tick := time.NewTicker(sv.s.m.killEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
			sv.s.ops.unexpectedExits.Add(1)
			sv.s.t.Logf("%s exited on its own: %v\n%s", p.Name, p.ExitErr(), p.LogTail(20))
			if log, _ := os.ReadFile(p.LogPath); strings.Contains(string(log), "panic:") {
				sv.s.t.Errorf("%s panicked: see %s", p.Name, p.LogPath)
			}
			time.Sleep(time.Second)
			if p = sv.start(); p == nil {
				return
			}
		case <-sv.killNow:
			p.Kill()
			sv.s.ops.kills.Add(1)
			p = sv.start()
			sv.killed <- struct{}{}
			if p == nil {
				return
			}
		case <-tick.C:
			if !killing.Load() {
				continue
			}
			p.Kill()
			sv.s.ops.kills.Add(1)
			if p = sv.start(); p == nil {
				return
			}
		}
	}
}

// stop stops the CCM running now (SIGTERM, then SIGKILL after 5 s).
func (sv *supervisor) stop() {
	sv.mu.Lock()
	p := sv.cur
	sv.mu.Unlock()
	if p != nil {
		p.Stop(5 * time.Second)
	}
}

// selfCheck proves the checks can fail: a load balancer of this cluster
// tagged for a Service that does not exist must count as leaked, and a
// Node deleted while its instance exists as wrongly deleted.
func (s *soak) selfCheck(ctx context.Context) {
	t := s.t
	name := "soak-selfcheck-" + s.run
	if _, err := s.cloud.client.PutLoadBalancer(ctx, name, api.LoadBalancerSpec{Cluster: s.run,
		Tags:      map[string]string{local.TagServiceUID: "no-such-uid", local.TagServiceName: s.ns + "/gone"},
		Listeners: []api.Listener{{Protocol: "TCP", Port: 80, BackendPort: 30080}}, Backends: []api.Backend{}}); err != nil {
		t.Errorf("self-check: put load balancer: %v", err)
		return
	}
	if c := s.check(ctx); len(c.leaked) != 1 {
		t.Errorf("self-check: a load balancer without its Service is not counted as leaked: %v", c.leaked)
	}
	if err := s.cloud.client.DeleteLoadBalancer(ctx, name); err != nil {
		t.Errorf("self-check: %v", err)
	}
	victim := s.pick(nodeStateReady, nodeStateReady)
	if victim == "" {
		return
	}
	s.mu.Lock()
	before := len(s.wrong)
	s.mu.Unlock()
	if err := s.client.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Errorf("self-check: %v", err)
		return
	}
	testenv.Eventually(t, 10*time.Second, "the watcher to see the deletion of "+victim, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.wrong) == before+1, fmt.Sprint(s.wrong)
	})
	s.mu.Lock()
	s.wrong = s.wrong[:before]
	s.mu.Unlock()
	t.Logf("self-check: a leaked load balancer and a node deleted with its instance are both caught")
}
