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
