package agent

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDecideServerCount(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   countInputs
		want int
		from string
	}{
		{"no header yet, no leases", countInputs{}, 1, countFromFallback},
		{"header only", countInputs{Header: 3}, 3, countFromResponses},
		{"leases off ignore the lease count", countInputs{Header: 2, Leases: 5}, 2, countFromResponses},
		{"default source: leases win over a static header", countInputs{Header: 1, LeasesOn: true, Leases: 3}, 3, countFromLeases},
		{"default source: leases win even when lower", countInputs{Header: 4, LeasesOn: true, Leases: 2, Source: CountSourceDefault}, 2, countFromLeases},
		{"empty source is default", countInputs{Header: 4, LeasesOn: true, Leases: 2, Source: ""}, 2, countFromLeases},
		{"max: header higher", countInputs{Header: 4, LeasesOn: true, Leases: 2, Source: CountSourceMax}, 4, countFromResponses},
		{"max: leases higher", countInputs{Header: 1, LeasesOn: true, Leases: 3, Source: CountSourceMax}, 3, countFromLeases},
		{"max: equal keeps leases", countInputs{Header: 3, LeasesOn: true, Leases: 3, Source: CountSourceMax}, 3, countFromLeases},
		{"max: no header yet", countInputs{LeasesOn: true, Leases: 2, Source: CountSourceMax}, 2, countFromLeases},
		{"leases on, none counted", countInputs{Header: 0, LeasesOn: true, Leases: 0}, 1, countFromFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := decideServerCount(tc.in)
			if got != tc.want || from != tc.from {
				t.Errorf("decideServerCount(%+v) = %d (%s), want %d (%s)", tc.in, got, from, tc.want, tc.from)
			}
		})
	}
}

func TestLeaseCount(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lease := func(renew, acquire *time.Time, dur *int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: dur}}
		if renew != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renew}
		}
		if acquire != nil {
			l.Spec.AcquireTime = &metav1.MicroTime{Time: *acquire}
		}
		return l
	}
	recent, old := now.Add(-10*time.Second), now.Add(-time.Minute)
	d30 := ptr.To[int32](30)
	for _, tc := range []struct {
		name   string
		leases []*coordinationv1.Lease
		want   int
	}{
		{"none counts as 1", nil, 1},
		{"renewed recently", []*coordinationv1.Lease{lease(&recent, nil, d30), lease(&recent, nil, d30), lease(&recent, nil, d30)}, 3},
		{"expired ones do not count", []*coordinationv1.Lease{lease(&recent, nil, d30), lease(&old, nil, d30)}, 1},
		{"renew time wins over acquire time", []*coordinationv1.Lease{lease(&old, &recent, d30), lease(&recent, &old, d30)}, 1},
		{"acquire time when never renewed", []*coordinationv1.Lease{lease(nil, &recent, d30), lease(&recent, nil, d30)}, 2},
		{"no time or no duration: invalid", []*coordinationv1.Lease{lease(nil, nil, d30), lease(&recent, nil, nil), lease(&recent, nil, d30)}, 1},
		{"exactly at expiry is expired", []*coordinationv1.Lease{lease(ptr.To(now.Add(-30*time.Second)), nil, d30), lease(&recent, nil, d30), lease(&recent, nil, d30)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseCount(tc.leases, now); got != tc.want {
				t.Errorf("leaseCount = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestValidateCountSource(t *testing.T) {
	for s, ok := range map[string]bool{"": true, "default": true, "max": true, "Max": false, "leases": false} {
		if err := validateCountSource(s); (err == nil) != ok {
			t.Errorf("validateCountSource(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}
