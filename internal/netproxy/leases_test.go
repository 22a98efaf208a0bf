package netproxy

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaseValid(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(now.Add(-ago)); return &m }
	for _, tc := range []struct {
		name  string
		spec  coordinationv1.LeaseSpec
		valid bool
	}{
		{"renewed within its duration", coordinationv1.LeaseSpec{RenewTime: at(10 * time.Second), LeaseDurationSeconds: ptr.To[int32](30)}, true},
		{"renewed longer ago than its duration", coordinationv1.LeaseSpec{RenewTime: at(31 * time.Second), LeaseDurationSeconds: ptr.To[int32](30)}, false},
		{"exactly at its end", coordinationv1.LeaseSpec{RenewTime: at(30 * time.Second), LeaseDurationSeconds: ptr.To[int32](30)}, false},
		{"acquired, never renewed", coordinationv1.LeaseSpec{AcquireTime: at(5 * time.Second), LeaseDurationSeconds: ptr.To[int32](30)}, true},
		{"renew time wins over acquire time", coordinationv1.LeaseSpec{AcquireTime: at(time.Second), RenewTime: at(time.Minute), LeaseDurationSeconds: ptr.To[int32](30)}, false},
		{"no times", coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](30)}, false},
		{"no duration", coordinationv1.LeaseSpec{RenewTime: at(time.Second)}, false},
	} {
		if got := LeaseValid(&coordinationv1.Lease{Spec: tc.spec}, now); got != tc.valid {
			t.Errorf("%s: LeaseValid = %v, want %v", tc.name, got, tc.valid)
		}
	}
}
