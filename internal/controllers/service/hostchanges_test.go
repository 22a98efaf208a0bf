package service

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

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
		{"labels changed (zone): re-added", []cloud.Host{h("b", "10.0.0.2")}, []cloud.Host{labeled}, []string{"b=10.0.0.2"}, []string{"b=10.0.0.2"}},
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
	h := startHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers = lb }, svc(withFinalizer), node("n1", nil), node("n2", nil))
	eventually(t, 5*time.Second, "the first ensure", func() bool { return len(lb.snapshot()) == 1 })
	last := func() lbCall { c := lb.snapshot(); return c[len(c)-1] }
	if c := last(); c.op != "ensure" || !slices.Equal(c.hosts, []string{"n1", "n2"}) {
		t.Fatalf("first call %+v", c)
	}
	ctx := context.Background()
	if _, err := h.client.CoreV1().Nodes().Create(ctx, node("n3", nil), metav1.CreateOptions{}); err != nil {
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
	if _, err := h.client.CoreV1().Nodes().Create(ctx, node("n4", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a full ensure after the change found the load balancer gone", func() bool {
		c := last()
		return c.op == "ensure" && slices.Equal(c.hosts, []string{"n2", "n3", "n4"})
	})
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
	add, rem := c.hostChanges(gen1, gen2)
	if len(add) != 1 || add[0].Name != "b" || len(rem) != 0 {
		t.Fatalf("add %v remove %v; want add b", add, rem)
	}
	again, _ := c.hostChanges(gen1, gen2)
	if len(c.diffs) != 1 || &again[0] != &add[0] {
		t.Errorf("the same pair was computed again (%d remembered)", len(c.diffs))
	}
	relabeled := slices.Clone(gen1)
	relabeled[0].Labels = map[string]string{"topology.kubernetes.io/zone": "zone-b"}
	add, rem = c.hostChanges(relabeled, gen2)
	if len(add) != 2 || len(rem) != 1 {
		t.Errorf("from an equal-named but relabeled set: add %v remove %v; want a and b added, a removed", add, rem)
	}
	for range 2 * hostDiffsKept {
		c.hostChanges(slices.Clone(gen1), gen2)
	}
	if len(c.diffs) != hostDiffsKept {
		t.Errorf("%d differences remembered, want at most %d", len(c.diffs), hostDiffsKept)
	}
}
