package server

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func lease(name string, renewed time.Time, seconds int32) coordinationv1.Lease {
	t := metav1.NewMicroTime(renewed)
	return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"k8s-app": "konnectivity-server"}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &t, LeaseDurationSeconds: ptr.To(seconds)}}
}

func TestCountServers(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	noTimes := coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](30)}}
	acquiredOnly := coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](30), AcquireTime: ptr.To(metav1.NewMicroTime(now.Add(-time.Second)))}}
	for _, tc := range []struct {
		name   string
		leases []coordinationv1.Lease
		static int
		want   int
	}{
		{"no leases: at least 1", nil, 0, 1},
		{"no leases: the static count", nil, 3, 3},
		{"two valid", []coordinationv1.Lease{lease("a", now.Add(-10*time.Second), 30), lease("b", now, 30)}, 1, 2},
		{"expired ones do not count", []coordinationv1.Lease{lease("a", now.Add(-31*time.Second), 30), lease("b", now, 30)}, 1, 1},
		{"exactly at expiry: expired (renew+duration must be after now)", []coordinationv1.Lease{lease("a", now.Add(-30*time.Second), 30)}, 0, 1},
		{"neither renew nor acquire time: expired", []coordinationv1.Lease{noTimes, noTimes}, 0, 1},
		{"acquire time counts when never renewed", []coordinationv1.Lease{acquiredOnly, lease("b", now, 30)}, 0, 2},
		{"the static count is a floor", []coordinationv1.Lease{lease("a", now, 30)}, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CountServers(tc.leases, now, tc.static); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestLeasePublisher: it creates and renews its Lease, deletes an expired
// one of a gone server (not a live one), counts the live ones, and removes
// its own when stopped.
func TestLeasePublisher(t *testing.T) {
	now := time.Now()
	gone, live := lease(LeaseName("gone"), now.Add(-time.Minute), 30), lease(LeaseName("other"), now, 30)
	client := fake.NewClientset(&gone, &live)
	p, err := NewLeasePublisher(client, "kube-system", "k8s-app=konnectivity-server", "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for p.Count() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p.Count() != 2 {
		t.Fatalf("count = %d, want 2 (me and other)", p.Count())
	}
	leases, _ := client.CoordinationV1().Leases("kube-system").List(context.Background(), metav1.ListOptions{})
	names := map[string]bool{}
	for _, l := range leases.Items {
		names[l.Name] = true
	}
	if !names[LeaseName("me")] || !names[LeaseName("other")] || names[LeaseName("gone")] {
		t.Errorf("leases after one round: %v", names)
	}
	cancel()
	<-done
	if _, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), LeaseName("me"), metav1.GetOptions{}); err == nil {
		t.Error("own Lease left behind after stop")
	}
	if _, err := NewLeasePublisher(client, "kube-system", "not a label", "me", 1); err == nil {
		t.Error("a malformed --lease-label was accepted")
	}
}
