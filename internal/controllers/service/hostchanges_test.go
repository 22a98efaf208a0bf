package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

func TestHostChanges(t *testing.T) {
	h := func(name, ip string) cloud.Host {
		return cloud.Host{Name: name, ProviderID: "local://" + name, Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}
	}
	labeled := h("b", "10.0.0.2")
	labeled.Labels = map[string]string{"topology.kubernetes.io/zone": "zone-b"}
	reborn := h("b", "10.0.0.2")
	reborn.ProviderID = "local://i-new"
	twoAddrs := h("c", "10.0.0.3")
	twoAddrs.Addresses = append(twoAddrs.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.3"})
	twoAddrsSwapped := twoAddrs
	twoAddrsSwapped.Addresses = []corev1.NodeAddress{twoAddrs.Addresses[1], twoAddrs.Addresses[0]}
	names := func(hs []cloud.Host) []string {
		out := []string{}
		for _, x := range hs {
			out = append(out, x.Name+"="+x.Addresses[0].Address)
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		from, to         []cloud.Host
		wantAdd, wantRem []string
	}{
		{"same", []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}, []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}, []string{}, []string{}},
		{"one joins", []cloud.Host{h("a", "10.0.0.1")}, []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}, []string{"b=10.0.0.2"}, []string{}},
		{"one leaves", []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}, []cloud.Host{h("b", "10.0.0.2")}, []string{}, []string{"a=10.0.0.1"}},
		{"order is not a change", []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}, []cloud.Host{h("b", "10.0.0.2"), h("a", "10.0.0.1")}, []string{}, []string{}},
		{"address changed: remove old, add new", []cloud.Host{h("a", "10.0.0.1")}, []cloud.Host{h("a", "10.0.0.9")}, []string{"a=10.0.0.9"}, []string{"a=10.0.0.1"}},
		{"labels changed (zone): updated in place, not removed", []cloud.Host{h("b", "10.0.0.2")}, []cloud.Host{labeled}, []string{"b=10.0.0.2"}, []string{}},
		{"another instance under the same name and address: remove and add", []cloud.Host{h("b", "10.0.0.2")}, []cloud.Host{reborn}, []string{"b=10.0.0.2"}, []string{"b=10.0.0.2"}},
		{"addresses reordered (the first of a family may be the backend): remove and add", []cloud.Host{twoAddrs}, []cloud.Host{twoAddrsSwapped}, []string{"c=198.51.100.3"}, []string{"c=10.0.0.3"}},
		{"all replaced", []cloud.Host{h("a", "10.0.0.1")}, []cloud.Host{h("c", "10.0.0.3")}, []string{"c=10.0.0.3"}, []string{"a=10.0.0.1"}},
		{"from nothing", nil, []cloud.Host{h("a", "10.0.0.1")}, []string{"a=10.0.0.1"}, []string{}},
		{"to nothing", []cloud.Host{h("a", "10.0.0.1")}, nil, []string{}, []string{"a=10.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add, rem := HostChanges(tc.from, tc.to)
			if !slices.Equal(names(add), tc.wantAdd) || !slices.Equal(names(rem), tc.wantRem) {
				t.Errorf("add %v remove %v; want add %v remove %v", names(add), names(rem), tc.wantAdd, tc.wantRem)
			}
		})
	}
}

// changerLB is a fakeLB that also changes hosts incrementally; notFound
// makes the next change fail as if the load balancer were gone.
type changerLB struct {
	*fakeLB
	notFound bool
}

func (l *changerLB) ChangeLoadBalancerHosts(_ context.Context, spec *cloud.LoadBalancerSpec, add, remove []cloud.Host) error {
	names := []string{}
	for _, h := range add {
		names = append(names, "+"+h.Name)
	}
	for _, h := range remove {
		names = append(names, "-"+h.Name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, lbCall{op: "change", svc: spec.Service.String(), hosts: names})
	if l.notFound {
		l.notFound = false
		return errors.Join(cloud.ErrNotFound, errors.New("load balancer gone"))
	}
	return nil
}

// TestIncrementalHostChanges: with a provider that changes hosts, a node
// joining or leaving is one change of that host (never the whole set);
// a load balancer found gone is ensured again in full.
func TestIncrementalHostChanges(t *testing.T) {
	lb := &changerLB{fakeLB: &fakeLB{}}
	h := startHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers = lb }, svc(withFinalizer), nodeAt("n1", "10.0.0.1"), nodeAt("n2", "10.0.0.2"))
	eventually(t, 5*time.Second, "the first ensure", func() bool { return len(lb.snapshot()) == 1 })
	last := func() lbCall { c := lb.snapshot(); return c[len(c)-1] }
	if c := last(); c.op != "ensure" || !slices.Equal(c.hosts, []string{"n1", "n2"}) {
		t.Fatalf("first call %+v", c)
	}
	ctx := context.Background()
	if _, err := h.client.CoreV1().Nodes().Create(ctx, nodeAt("n3", "10.0.0.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a change adding n3", func() bool {
		c := last()
		return c.op == "change" && slices.Equal(c.hosts, []string{"+n3"})
	})
	if err := h.client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a change removing n1", func() bool {
		c := last()
		return c.op == "change" && slices.Equal(c.hosts, []string{"-n1"})
	})
	for _, c := range lb.snapshot() {
		if c.op == "update" {
			t.Errorf("a full host update with an incremental provider: %+v", c)
		}
	}
	// Gone from the cloud: the next sync ensures it in full.
	lb.mu.Lock()
	lb.notFound = true
	lb.mu.Unlock()
	if _, err := h.client.CoreV1().Nodes().Create(ctx, nodeAt("n4", "10.0.0.4"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a full ensure after the change found the load balancer gone", func() bool {
		c := last()
		return c.op == "ensure" && slices.Equal(c.hosts, []string{"n2", "n3", "n4"})
	})
}

// A node relabeled (kubectl label node) and then any node joining: the
// relabeled host is sent as an update, never removed, so the cloud does
// not drain a backend that never stopped serving.
func TestRelabeledHostNotRemoved(t *testing.T) {
	lb := &changerLB{fakeLB: &fakeLB{}}
	h := startHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers = lb }, svc(withFinalizer), nodeAt("n1", "10.0.0.1"), nodeAt("n2", "10.0.0.2"))
	eventually(t, 5*time.Second, "the first ensure", func() bool { return len(lb.snapshot()) == 1 })
	ctx := context.Background()
	n1, err := h.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.Labels = map[string]string{"team": "blue"}
	if _, err := h.client.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().Nodes().Create(ctx, nodeAt("n3", "10.0.0.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a change adding n3", func() bool {
		c := lb.snapshot()
		return slices.Contains(c[len(c)-1].hosts, "+n3")
	})
	calls := lb.snapshot()
	if c := calls[len(calls)-1]; !slices.Equal(c.hosts, []string{"+n1", "+n3"}) {
		t.Errorf("last change %+v, want n1 updated (its labels) and n3 added", c)
	}
	for _, c := range calls {
		if slices.Contains(c.hosts, "-n1") || c.op == "update" {
			t.Errorf("the relabeled n1 was removed (or the whole set sent): %+v", c)
		}
	}
}

// The difference between two host sets is computed once, whatever the
// number of load balancers moving between them, and recognised by the
// identity of the sets: an equal but distinct set (e.g. with other labels)
// is computed anew.
func TestHostChangesComputedOncePerPair(t *testing.T) {
	h := func(name, ip string) cloud.Host {
		return cloud.Host{Name: name, ProviderID: "local://" + name, Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}
	}
	gen1 := []cloud.Host{h("a", "10.0.0.1")}
	gen2 := []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}
	c := &Controller{}
	add, rem, whole := c.hostChanges(context.Background(), gen1, gen2)
	if len(add) != 1 || add[0].Name != "b" || len(rem) != 0 || whole {
		t.Fatalf("add %v remove %v whole %v; want add b", add, rem, whole)
	}
	again, _, _ := c.hostChanges(context.Background(), gen1, gen2)
	if len(c.diffs) != 1 || &again[0] != &add[0] {
		t.Errorf("the same pair was computed again (%d remembered)", len(c.diffs))
	}
	relabeled := slices.Clone(gen1)
	relabeled[0].Labels = map[string]string{"topology.kubernetes.io/zone": "zone-b"}
	add, rem, _ = c.hostChanges(context.Background(), relabeled, gen2)
	if len(add) != 2 || len(rem) != 0 {
		t.Errorf("from an equal-named but relabeled set: add %v remove %v; want a (updated) and b added, nothing removed", add, rem)
	}
	for range 2 * hostDiffsKept {
		c.hostChanges(context.Background(), slices.Clone(gen1), gen2)
	}
	if len(c.diffs) != hostDiffsKept {
		t.Errorf("%d differences remembered, want at most %d", len(c.diffs), hostDiffsKept)
	}
}

// nodeAt is a node with its own InternalIP.
func nodeAt(name, ip string) *corev1.Node {
	return node(name, func(n *corev1.Node) { n.Status.Addresses[0].Address = ip })
}

func TestSharedAddress(t *testing.T) {
	h := func(name string, addrs ...corev1.NodeAddress) cloud.Host {
		return cloud.Host{Name: name, ProviderID: "local://" + name, Addresses: addrs}
	}
	internal := func(ip string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
	}
	external := func(ip string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip}
	}
	hostname := func(n string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeHostName, Address: n} }
	for _, tc := range []struct {
		name  string
		hosts []cloud.Host
		want  string
	}{
		{"none", nil, ""},
		{"distinct", []cloud.Host{h("a", internal("10.0.0.1")), h("b", internal("10.0.0.2"))}, ""},
		{"an address reused by a new node while the old one is still there",
			[]cloud.Host{h("n007", internal("10.0.0.7")), h("n012", internal("10.0.0.7"))}, "10.0.0.7"},
		{"internal of one, external of another", []cloud.Host{h("a", internal("10.0.0.1")), h("b", internal("10.0.0.2"), external("10.0.0.1"))}, "10.0.0.1"},
		{"one host with the address twice (internal and external)", []cloud.Host{h("a", internal("10.0.0.1"), external("10.0.0.1"))}, ""},
		{"hostnames are not backend addresses", []cloud.Host{h("a", internal("10.0.0.1"), hostname("x")), h("b", internal("10.0.0.2"), hostname("x"))}, ""},
		{"no addresses", []cloud.Host{h("a"), h("b")}, ""},
		{"IPv6, shared", []cloud.Host{h("a", internal("fd10::1")), h("b", internal("fd10::1"))}, "fd10::1"},
		{"dual-stack, the IPv6 address shared", []cloud.Host{h("a", internal("10.0.0.1"), internal("fd10::1")), h("b", internal("10.0.0.2"), internal("fd10::1"))}, "fd10::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SharedAddress(tc.hosts); got != tc.want {
				t.Errorf("SharedAddress = %q, want %q", got, tc.want)
			}
		})
	}
}

// The whole set is sent when either set, alone, has a shared address:
// not for an address that moved from a host of the old set to another of
// the new (a difference removes, then adds, which is right). The decision
// is remembered with the difference.
func TestHostChangesWhole(t *testing.T) {
	h := func(name, ip string) cloud.Host {
		return cloud.Host{Name: name, ProviderID: "local://" + name, Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}
	}
	for _, tc := range []struct {
		name     string
		from, to []cloud.Host
		want     bool
	}{
		{"distinct", []cloud.Host{h("a", "10.0.0.1")}, []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.2")}, false},
		{"shared in the new set only (a node took a deleted one's address)", []cloud.Host{h("a", "10.0.0.1")}, []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.1")}, true},
		{"shared in the old set only (the old node's Node deleted)", []cloud.Host{h("a", "10.0.0.1"), h("b", "10.0.0.1")}, []cloud.Host{h("b", "10.0.0.1")}, true},
		{"moved from one host to another across the sets", []cloud.Host{h("a", "10.0.0.1")}, []cloud.Host{h("b", "10.0.0.1")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{}
			if _, _, whole := c.hostChanges(context.Background(), tc.from, tc.to); whole != tc.want {
				t.Errorf("whole = %v, want %v", whole, tc.want)
			}
			if _, _, whole := c.hostChanges(context.Background(), tc.from, tc.to); whole != tc.want || len(c.diffs) != 1 {
				t.Errorf("remembered: whole = %v (%d differences kept), want %v from one", whole, len(c.diffs), tc.want)
			}
		})
	}
}

// addressLB is a cloud whose load balancers key their backends by
// address, as the local cloud's (api.ChangeBackendsRequest): a change
// removes, then adds, by address; adding an address it has renames that
// backend. It keeps one load balancer's backends, address -> host name.
type addressLB struct {
	*fakeLB
	mu       sync.Mutex
	backends map[string]string
}

func internalIP(h cloud.Host) string {
	for _, a := range h.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func (l *addressLB) set(hosts []cloud.Host) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.backends = map[string]string{}
	for _, h := range hosts {
		l.backends[internalIP(h)] = h.Name
	}
}

func (l *addressLB) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	l.set(hosts)
	return l.fakeLB.EnsureLoadBalancer(ctx, spec, hosts)
}

func (l *addressLB) UpdateLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	l.set(hosts)
	return l.fakeLB.UpdateLoadBalancerHosts(ctx, spec, hosts)
}

func (l *addressLB) ChangeLoadBalancerHosts(_ context.Context, spec *cloud.LoadBalancerSpec, add, remove []cloud.Host) error {
	l.record("change", spec, append(slices.Clone(add), remove...))
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range remove {
		delete(l.backends, internalIP(h))
	}
	for _, h := range add {
		l.backends[internalIP(h)] = h.Name
	}
	return nil
}

func (l *addressLB) names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []string{}
	for _, n := range l.backends {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestAddressReusedByNewNode is the soak's lost backend: the cloud deletes
// an instance (node n1, 10.0.0.1) and gives its address to a new one (n3)
// before n1's Node is deleted. While both Nodes are hosts, the address-
// keyed cloud has one backend for the two; when n1's Node goes, its
// removal must not take n3's backend with it.
//
// How it fails on regression: sending the differences alone (+n3, which
// renames the backend at 10.0.0.1, then -n1, which deletes it) leaves the
// load balancer without n3 while the controller remembers n3 in it, and
// nothing changes that until the host set changes again.
func TestAddressReusedByNewNode(t *testing.T) {
	lb := &addressLB{fakeLB: &fakeLB{}}
	h := startHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers = lb }, svc(withFinalizer),
		nodeAt("n1", "10.0.0.1"), nodeAt("n2", "10.0.0.2"))
	synced := func(want ...string) func() bool {
		return func() bool {
			hosts, hash := h.c.currentHosts()
			h.c.mu.Lock()
			st, ok := h.c.state["ns/s"]
			h.c.mu.Unlock()
			names := []string{}
			for _, x := range hosts {
				names = append(names, x.Name)
			}
			return ok && st.hostsHash == hash && slices.Equal(names, want)
		}
	}
	eventually(t, 5*time.Second, "the load balancer with n1 and n2", synced("n1", "n2"))
	ctx := context.Background()
	if _, err := h.client.CoreV1().Nodes().Create(ctx, nodeAt("n3", "10.0.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the load balancer synced with n1, n2 and n3", synced("n1", "n2", "n3"))
	if err := h.client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the load balancer synced with n2 and n3", synced("n2", "n3"))
	if got := lb.names(); !slices.Equal(got, []string{"n2", "n3"}) {
		t.Fatalf("the cloud's backends are %v, want [n2 n3]", got)
	}
	// Both changes (n3 joining, n1 leaving) went whole, and were counted.
	whole := testutil.ToFloat64(h.c.metrics.wholeHostSets)
	if whole != 2 {
		t.Errorf("portside_ccm_service_whole_host_set_updates_total = %v, want 2", whole)
	}
	// Once no address is shared, a node joining is a difference again.
	if _, err := h.client.CoreV1().Nodes().Create(ctx, nodeAt("n4", "10.0.0.4"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the load balancer synced with n2, n3 and n4", synced("n2", "n3", "n4"))
	if got := lb.names(); !slices.Equal(got, []string{"n2", "n3", "n4"}) {
		t.Fatalf("the cloud's backends are %v, want [n2 n3 n4]", got)
	}
	if c := lb.snapshot(); c[len(c)-1].op != "change" || !slices.Equal(c[len(c)-1].hosts, []string{"n4"}) {
		t.Errorf("n4 joining without a shared address: last call %+v, want a change of n4", c[len(c)-1])
	}
	if got := testutil.ToFloat64(h.c.metrics.wholeHostSets); got != whole {
		t.Errorf("n4 joining without a shared address counted as whole: %v, want %v", got, whole)
	}
}
