package service

import (
	"errors"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/cloud"
)

func TestNextOrphanPass(t *testing.T) {
	period := 5 * time.Minute
	failed := errors.New("local cloud: 500 InjectedFault")
	for _, tc := range []struct {
		name     string
		err      error
		failures int
		want     time.Duration
	}{
		{"a pass that did everything waits the period", nil, 0, period},
		{"first failure: 1s", failed, 1, time.Second},
		{"second in a row: 2s", failed, 2, 2 * time.Second},
		{"fifth: 16s", failed, 5, 16 * time.Second},
		{"many: capped at the period", failed, 30, period},
		{"throttled: the cloud's Retry-After", cloud.RetryAfter(7*time.Second, "throttled"), 3, 7 * time.Second},
		{"Retry-After beyond the period: the period", cloud.RetryAfter(time.Hour, "throttled"), 1, period},
		{"short period caps the backoff", failed, 3, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := period
			if tc.name == "short period caps the backoff" {
				p = 3 * time.Second
			}
			if got := NextOrphanPass(tc.err, tc.failures, p); got != tc.want {
				t.Errorf("NextOrphanPass = %v, want %v", got, tc.want)
			}
		})
	}
}
