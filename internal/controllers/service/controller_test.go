package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// These tests run the whole controller (informers on a fake clientset,
// Run, its workers and node watcher) against fakeLB. The fake clientset's
// object tracker applies merge patches, including those sent to the
// "status" subresource with metadata.finalizers, to the whole object; it
// ignores the resourceVersion a merge patch carries (no conflict is ever
// returned), so the controller's optimistic-concurrency guard is not
// exercised here.

// lbCall is one call fakeLB received.
type lbCall struct {
	op    string   // "ensure", "update" or "delete"
	svc   string   // namespace/name
	hosts []string // host names, as given
}

// fakeLB is a cloud.LoadBalancers that records its calls with their host
// sets. The first EnsureLoadBalancer waits for block to be closed, when
// set (entered is closed when it starts waiting); status, when set,
// decides EnsureLoadBalancer's result by call number (1-based).
type fakeLB struct {
	block   chan struct{}
	entered chan struct{}
	status  func(n int) (*corev1.LoadBalancerStatus, error)

	mu      sync.Mutex
	calls   []lbCall
	ensures int
}

var testIngress = &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}}

func (*fakeLB) Features() cloud.LoadBalancerFeatures {
	return cloud.LoadBalancerFeatures{Protocols: []corev1.Protocol{corev1.ProtocolTCP}}
}

func (*fakeLB) GetLoadBalancer(context.Context, *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}

func (l *fakeLB) record(op string, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) int {
	names := make([]string, 0, len(hosts))
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, lbCall{op: op, svc: spec.Service.String(), hosts: names})
	if op == "ensure" {
		l.ensures++
	}
	return l.ensures
}

func (l *fakeLB) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	n := l.record("ensure", spec, hosts)
	if n == 1 && l.block != nil {
		close(l.entered)
		select {
		case <-l.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if l.status != nil {
		return l.status(n)
	}
	return testIngress.DeepCopy(), nil
}

func (l *fakeLB) UpdateLoadBalancerHosts(_ context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	l.record("update", spec, hosts)
	return nil
}

func (l *fakeLB) EnsureLoadBalancerDeleted(_ context.Context, spec *cloud.LoadBalancerSpec) error {
	l.record("delete", spec, nil)
	return nil
}

func (l *fakeLB) snapshot() []lbCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// harness is a controller on a fake clientset, with real informers.
type harness struct {
	t       *testing.T
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	c       *Controller
	lb      *fakeLB
	rec     *record.FakeRecorder
}

// newHarness builds the controller (2 workers unless cfg says otherwise);
// start runs it.
func newHarness(t *testing.T, lb *fakeLB, cfg func(*Config), objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	// The FakeRecorder blocks when its buffer is full: make it large.
	rec := record.NewFakeRecorder(10000)
	config := Config{Client: client, Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(),
		LoadBalancers: lb, Recorder: rec, ClusterName: "test", ClusterUID: "cluster-uid", Workers: 2}
	if cfg != nil {
		cfg(&config)
	}
	c, err := New(config)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, client: client, factory: factory, c: c, lb: lb, rec: rec}
}

// start starts the informers and Run; both are stopped when the test ends.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.c.Run(ctx)
	}()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			h.t.Error("Run did not return after its context was cancelled")
		}
		h.factory.Shutdown()
	})
}

func startHarness(t *testing.T, lb *fakeLB, cfg func(*Config), objs ...runtime.Object) *harness {
	t.Helper()
	h := newHarness(t, lb, cfg, objs...)
	h.start()
	return h
}

func (h *harness) hostNames() []string {
	hosts, _ := h.c.currentHosts()
	names := make([]string, 0, len(hosts))
	for _, host := range hosts {
		names = append(names, host.Name)
	}
	return names
}

func (h *harness) remembered(key string) bool {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	_, ok := h.c.state[key]
	return ok
}

func (h *harness) get(name string) *corev1.Service {
	h.t.Helper()
	s, err := h.client.CoreV1().Services("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// eventually polls cond every 10ms until it holds, or fails after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// consistently checks that cond holds for d, polling every 10ms.
func consistently(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ready(s *corev1.Service) bool {
	return meta.IsStatusConditionTrue(s.Status.Conditions, ConditionLoadBalancerReady)
}

// TestStartupWithManyNodesRecomputesHostsOnce: with 2,000 nodes at
// startup, the informer delivers 2,000 node add events. The controller
// coalesces them (a one-slot channel) and only recomputes the host set
// after the caches synced (once in Run, plus at most one pending signal),
// and the load balancer is made once, with every node.
//
// How it fails on regression: recomputing per node event (onNodes calling
// recomputeHosts, or an unbuffered/unbounded signal) makes recomputes about
// 2,000 (each an O(N) list, O(N²) in all); starting watchNodes before the
// caches synced makes many recomputes over a growing partial node list, and
// provider calls with partial host sets, which the host-count check catches.
func TestStartupWithManyNodesRecomputesHostsOnce(t *testing.T) {
	const n = 2000
	objs := []runtime.Object{svc(withFinalizer)}
	for i := range n {
		objs = append(objs, node(fmt.Sprintf("n%04d", i), nil))
	}
	start := time.Now()
	lb := &fakeLB{}
	h := startHarness(t, lb, nil, objs...)
	eventually(t, 20*time.Second, "the host set of all nodes", func() bool { return len(h.hostNames()) == n })
	eventually(t, 5*time.Second, "the load balancer", func() bool { return h.remembered("ns/s") })
	// Let late handler notifications (delivered after the caches synced)
	// arrive: they must not cost more than one more recompute.
	consistently(t, 300*time.Millisecond, "at most 3 host-set recomputes", func() bool { return h.c.recomputes.Load() <= 3 })
	t.Logf("%d nodes: %d host-set recomputes, ready in %v", n, h.c.recomputes.Load(), time.Since(start))
	for _, call := range lb.snapshot() {
		if len(call.hosts) != n {
			t.Errorf("%s of %s with %d hosts, want %d (a partial host set)", call.op, call.svc, len(call.hosts), n)
		}
	}
	if calls := lb.snapshot(); len(calls) != 1 || calls[0].op != "ensure" {
		t.Errorf("%d provider calls, want a single ensure", len(calls))
	}

	// The node watcher still runs: a new node is picked up, with one recompute.
	before := h.c.recomputes.Load()
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), node("zz-new", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the new node's host update", func() bool {
		calls := lb.snapshot()
		last := calls[len(calls)-1]
		return last.op == "update" && len(last.hosts) == n+1
	})
	if got := h.c.recomputes.Load() - before; got != 1 {
		t.Errorf("a node added: %d recomputes, want 1", got)
	}
}

// TestNodeAddedDuringFirstEnsureIsNotLost: a node joins while the first
// EnsureLoadBalancer of a Service is in flight (with the hosts from before
// the node). The host-set change must queue that Service too, so that the
// provider is then given the new node.
//
// The Service already carries the cleanup finalizer (e.g. after a
// restart), so no finalizer patch requeues it: the only thing that can
// bring the new node to its load balancer is the node change. How it fails
// on regression: if recomputeHosts queued only Services already synced
// (in c.state), or ensure remembered the host set current after the call
// instead of the one it passed, no call with n2 ever comes and the wait
// times out.
func TestNodeAddedDuringFirstEnsureIsNotLost(t *testing.T) {
	lb := &fakeLB{block: make(chan struct{}), entered: make(chan struct{})}
	h := startHarness(t, lb, nil, svc(withFinalizer), node("n1", nil))
	select {
	case <-lb.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no EnsureLoadBalancer")
	}
	if calls := lb.snapshot(); len(calls) != 1 || !slices.Equal(calls[0].hosts, []string{"n1"}) {
		t.Fatalf("calls before the node joined: %+v", calls)
	}
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), node("n2", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The host set is recomputed while the ensure is still blocked.
	eventually(t, 5*time.Second, "the host set with n2", func() bool { return slices.Contains(h.hostNames(), "n2") })
	close(lb.block)
	eventually(t, 5*time.Second, "a provider call with n2", func() bool {
		for _, call := range lb.snapshot() {
			if call.svc == "ns/s" && slices.Contains(call.hosts, "n2") {
				return true
			}
		}
		return false
	})
	t.Logf("calls: %+v", lb.snapshot())
}

// TestEnsureWithoutStatusIsRetried: EnsureLoadBalancer returning no status
// (nil, nil) has not provisioned anything: the Service gets no ingress and
// no LoadBalancerReady=True, and the controller asks again by itself (with
// backoff: 1s, then 2s) until a real status comes.
//
// The Service already has the finalizer, so no patch of ours requeues it:
// only the error-with-backoff path can bring the second and third calls.
// How it fails on regression: taking a nil status as success either stops
// the retries (the third call never comes: timeout) or records the Service
// ready without ingress (seen by the provider at the next call).
func TestEnsureWithoutStatusIsRetried(t *testing.T) {
	lb := &fakeLB{}
	h := newHarness(t, lb, nil, svc(withFinalizer), node("n1", nil))
	type seen struct{ ingress, ready bool }
	var (
		mu     sync.Mutex
		atCall []seen // the Service in the API at each call
	)
	lb.status = func(n int) (*corev1.LoadBalancerStatus, error) {
		s, err := h.client.CoreV1().Services("ns").Get(context.Background(), "s", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		mu.Lock()
		atCall = append(atCall, seen{ingress: len(s.Status.LoadBalancer.Ingress) > 0, ready: ready(s)})
		mu.Unlock()
		if n < 3 {
			return nil, nil
		}
		return testIngress.DeepCopy(), nil
	}
	start := time.Now()
	h.start()
	eventually(t, 8*time.Second, "the Service ready with its ingress", func() bool {
		s := h.get("s")
		return ready(s) && len(s.Status.LoadBalancer.Ingress) > 0
	})
	t.Logf("ready after %v", time.Since(start))
	mu.Lock()
	got := slices.Clone(atCall)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d EnsureLoadBalancer calls, want 3", len(got))
	}
	for i, s := range got {
		if s.ingress || s.ready {
			t.Errorf("at call %d the Service had ingress %v, ready %v: a nil status was recorded", i+1, s.ingress, s.ready)
		}
	}
	// Two warnings, one per status-less answer.
	warnings := 0
	for len(h.rec.Events) > 0 {
		if e := <-h.rec.Events; strings.HasPrefix(e, "Warning SyncLoadBalancerFailed ") && strings.Contains(e, "no load-balancer status") {
			warnings++
		}
	}
	if warnings != 2 {
		t.Errorf("%d SyncLoadBalancerFailed warnings, want 2", warnings)
	}
}

// TestAddressOrderIsNotAChange: a node update that only reorders its
// addresses makes no provider call (nor even a host-set recompute).
//
// How it fails on regression: comparing addresses in order (in
// HostSetChanged and HostsHash) makes the reorder a host-set change, so
// the Service is queued and UpdateLoadBalancerHosts called; the recompute
// count catches a regression of HostSetChanged alone.
func TestAddressOrderIsNotAChange(t *testing.T) {
	lb := &fakeLB{}
	h := startHarness(t, lb, nil, svc(withFinalizer), node("n1", nil))
	eventually(t, 5*time.Second, "the load balancer", func() bool { return h.remembered("ns/s") })
	eventually(t, 5*time.Second, "no pending node signal", func() bool { return len(h.c.nodesChanged) == 0 })
	r0 := h.c.recomputes.Load()
	ctx := context.Background()
	n1, err := h.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(n1.Status.Addresses)
	if _, err := h.client.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the reordered node in the informer", func() bool {
		n, err := h.c.nodes.Get("n1")
		return err == nil && n.Status.Addresses[0].Type == corev1.NodeHostName
	})
	consistently(t, 300*time.Millisecond, "no call and no recompute after the reorder", func() bool {
		return len(lb.snapshot()) == 1 && h.c.recomputes.Load() == r0
	})
	// A real change comes after the reorder in the node event stream: once
	// it reached the provider, a late call for the reorder would be seen.
	if _, err := h.client.CoreV1().Nodes().Create(ctx, node("n2", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the host update with n2", func() bool { return len(lb.snapshot()) >= 2 })
	want := []lbCall{{op: "ensure", svc: "ns/s", hosts: []string{"n1"}}, {op: "update", svc: "ns/s", hosts: []string{"n1", "n2"}}}
	consistently(t, 100*time.Millisecond, "exactly the ensure and the n2 update", func() bool {
		return slices.EqualFunc(lb.snapshot(), want, func(a, b lbCall) bool {
			return a.op == b.op && a.svc == b.svc && slices.Equal(a.hosts, b.hosts)
		})
	})
}

// TestOtherClassServiceWithFinalizerGetsNoCall: a LoadBalancer Service of
// another class, carrying the (shared, upstream) cleanup finalizer, being
// deleted: it is not ours, so no provider call, no patch, and its
// finalizer stays for its own controller to remove.
//
// The fake clientset deletes at once, so the Service is created already
// deleting. One worker and a Service of ours created afterwards order the
// queue: once ours was ensured, the other's key, if it had been queued,
// was synced. How it fails on regression: cleaning up every Service with
// the finalizer on deletion (upstream's behaviour) calls
// EnsureLoadBalancerDeleted and patches the finalizer away.
func TestOtherClassServiceWithFinalizerGetsNoCall(t *testing.T) {
	for _, class := range []string{"", "mine"} {
		t.Run("class="+class, func(t *testing.T) {
			other := svc(withClass("x"), withFinalizer, deleting)
			other.Name, other.UID = "other", "uid-other"
			lb := &fakeLB{}
			h := startHarness(t, lb, func(c *Config) { c.Class, c.Workers = class, 1 }, other, node("n1", nil))
			eventually(t, 5*time.Second, "the first host set", func() bool { return h.c.recomputes.Load() > 0 })
			ours := svc(withFinalizer)
			ours.Name, ours.UID = "ours", "uid-ours"
			if class != "" {
				ours.Spec.LoadBalancerClass = &class
			}
			if _, err := h.client.CoreV1().Services("ns").Create(context.Background(), ours, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "our Service's load balancer", func() bool { return h.remembered("ns/ours") })
			for _, call := range lb.snapshot() {
				if call.svc != "ns/ours" {
					t.Errorf("provider call for another class's Service: %+v", call)
				}
			}
			if got := h.get("other"); !HasFinalizer(got) {
				t.Errorf("the other class's finalizer was removed: %v", got.Finalizers)
			}
			for _, a := range h.client.Actions() {
				if p, ok := a.(clienttesting.PatchAction); ok && p.GetName() == "other" {
					t.Errorf("the other class's Service was patched: %s %s", p.GetSubresource(), p.GetPatch())
				}
			}
		})
	}
}

// TestRememberedSpecFollowsTheCache: what the controller remembers of a
// synced load balancer points at the informer's current Service, not at
// the one the last sync saw; else every Service is held twice (the cache
// replaces that object when the controller's own status patch comes back).
func TestRememberedSpecFollowsTheCache(t *testing.T) {
	lb := &fakeLB{}
	h := startHarness(t, lb, nil, svc(withFinalizer), node("n1", nil))
	eventually(t, 5*time.Second, "the load balancer", func() bool { return h.remembered("ns/s") })
	ctx := context.Background()
	s, err := h.client.CoreV1().Services("ns").Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels = map[string]string{"touched": "1"}
	if _, err := h.client.CoreV1().Services("ns").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the remembered spec to hold the cached Service", func() bool {
		cached, err := h.c.services.Services("ns").Get("s")
		if err != nil || cached.Labels["touched"] != "1" {
			return false
		}
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return h.c.state["ns/s"].spec.Object == cached
	})
}
