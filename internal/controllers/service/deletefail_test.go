package service

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// failingDeleteLB fails EnsureLoadBalancerDeleted until allowed.
type failingDeleteLB struct {
	*fakeLB
	mu       sync.Mutex
	allow    bool
	attempts int
}

func (l *failingDeleteLB) EnsureLoadBalancerDeleted(ctx context.Context, spec *cloud.LoadBalancerSpec) error {
	l.mu.Lock()
	l.attempts++
	allow := l.allow
	l.mu.Unlock()
	if !allow {
		return errors.New("cloud unavailable")
	}
	return l.fakeLB.EnsureLoadBalancerDeleted(ctx, spec)
}

func (l *failingDeleteLB) tries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attempts
}

func (l *failingDeleteLB) succeed() {
	l.mu.Lock()
	l.allow = true
	l.mu.Unlock()
}

// TestFailedDeletionKeepsTheFinalizer: while the cloud fails to delete a
// load balancer, its Service keeps the finalizer (deleted, or changed to
// ClusterIP) and the controller keeps retrying: dropping the finalizer on
// an error would leak the load balancer with nothing left to delete it.
// Once the cloud succeeds, the finalizer goes.
func TestFailedDeletionKeepsTheFinalizer(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []svcOpt
	}{
		{"deleted Service", []svcOpt{withFinalizer, deleting}},
		{"type changed to ClusterIP", []svcOpt{withFinalizer, withType(corev1.ServiceTypeClusterIP)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb := &failingDeleteLB{fakeLB: &fakeLB{}}
			h := startHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers, c.Workers = lb, 1 }, svc(tc.opts...), node("n1", nil))
			eventually(t, 10*time.Second, "two failed deletions (a retry)", func() bool { return lb.tries() >= 2 })
			if got := h.get("s"); !HasFinalizer(got) {
				t.Fatalf("the finalizer was removed while the load balancer's deletion failed: %v", got.Finalizers)
			}
			lb.succeed()
			eventually(t, 10*time.Second, "the finalizer removed after the deletion succeeded", func() bool {
				s, err := h.client.CoreV1().Services("ns").Get(context.Background(), "s", metav1.GetOptions{})
				return err == nil && !HasFinalizer(s)
			})
		})
	}
}

// TestServiceGoneRetriesFailedDeletion: a Service removed without our
// finalizer running (its load balancer remembered) has the load balancer
// deleted; while the cloud fails, the controller keeps what it knows of
// it and retries, instead of forgetting it on the error.
func TestServiceGoneRetriesFailedDeletion(t *testing.T) {
	lb := &failingDeleteLB{fakeLB: &fakeLB{}}
	lb.succeed()
	h := startHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers, c.Workers = lb, 1 }, svc(withFinalizer), node("n1", nil))
	eventually(t, 5*time.Second, "the load balancer made", func() bool { return h.remembered("ns/s") })
	lb.mu.Lock()
	lb.allow, lb.attempts = false, 0
	lb.mu.Unlock()
	// Removed by hand, finalizer and all (the fake clientset deletes at once).
	if err := h.client.CoreV1().Services("ns").Delete(context.Background(), "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "two failed deletions (a retry)", func() bool { return lb.tries() >= 2 })
	if !h.remembered("ns/s") {
		t.Fatal("the load balancer was forgotten while its deletion failed")
	}
	lb.succeed()
	eventually(t, 10*time.Second, "the load balancer deleted and forgotten", func() bool { return !h.remembered("ns/s") })
}

// uidLB records the Service UIDs of the load balancers deleted.
type uidLB struct {
	*fakeLB
	mu      sync.Mutex
	deleted []string
}

func (l *uidLB) EnsureLoadBalancerDeleted(ctx context.Context, spec *cloud.LoadBalancerSpec) error {
	l.mu.Lock()
	l.deleted = append(l.deleted, string(spec.UID))
	l.mu.Unlock()
	return l.fakeLB.EnsureLoadBalancerDeleted(ctx, spec)
}

// TestRecreatedServiceDeletesTheOldLoadBalancer: a Service deleted and
// recreated under its name while the controller missed the deletion (the
// cache went from the old object straight to the new) has the old UID's
// load balancer deleted before the new one is made; nothing else is.
func TestRecreatedServiceDeletesTheOldLoadBalancer(t *testing.T) {
	ctx := context.Background()
	lb := &uidLB{fakeLB: &fakeLB{}}
	old := svc(withFinalizer)
	h := newHarness(t, lb.fakeLB, func(c *Config) { c.LoadBalancers = lb }, old, node("n1", nil))
	services := h.factory.Core().V1().Services().Informer().GetIndexer()
	for _, o := range []any{old, node("n1", nil)} {
		var err error
		if n, ok := o.(*corev1.Node); ok {
			err = h.factory.Core().V1().Nodes().Informer().GetIndexer().Add(n)
		} else {
			err = services.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h.c.recomputeHosts()
	if err := h.c.sync(ctx, "ns/s"); err != nil || !h.remembered("ns/s") {
		t.Fatalf("first sync: %v, remembered %v", err, h.remembered("ns/s"))
	}
	recreated := svc(withFinalizer)
	recreated.UID = "uid-2"
	if err := h.client.CoreV1().Services("ns").Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().Services("ns").Create(ctx, recreated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := services.Update(recreated); err != nil {
		t.Fatal(err)
	}
	if err := h.c.sync(ctx, "ns/s"); err != nil {
		t.Fatal(err)
	}
	lb.mu.Lock()
	deleted := append([]string(nil), lb.deleted...)
	lb.mu.Unlock()
	if len(deleted) != 1 || deleted[0] != string(old.UID) {
		t.Fatalf("load balancers deleted for UIDs %v, want only the old one (%s)", deleted, old.UID)
	}
	h.c.mu.Lock()
	st, ok := h.c.state["ns/s"]
	h.c.mu.Unlock()
	if !ok || st.spec.UID != "uid-2" {
		t.Fatalf("after the sync the controller remembers %+v, want the new Service's load balancer", st.spec)
	}
}
