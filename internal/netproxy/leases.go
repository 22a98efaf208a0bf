package netproxy

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// LeaseValid reports whether a proxy server's Lease is current: renewed
// (or acquired) less than its duration ago, as upstream's IsLeaseValid.
// Servers count each other by it, and agents count servers by it.
func LeaseValid(l *coordinationv1.Lease, now time.Time) bool {
	var last time.Time
	switch {
	case l.Spec.RenewTime != nil:
		last = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		last = l.Spec.AcquireTime.Time
	default:
		return false
	}
	if l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return last.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second).After(now)
}
