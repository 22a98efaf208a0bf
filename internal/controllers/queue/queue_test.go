package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/cloud"
)

func TestErrorContract(t *testing.T) {
	q := New("test", 10*time.Millisecond, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	calls := map[string][]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, q, 2, func(_ context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			calls[key] = append(calls[key], time.Now())
			n := len(calls[key])
			switch key {
			case "ok":
				return nil
			case "cloud-retry-after":
				if n == 1 {
					return cloud.RetryAfter(300*time.Millisecond, "provisioning")
				}
			case "backoff":
				if n < 4 {
					return errors.New("transient")
				}
			}
			return nil
		})
	}()
	for _, k := range []string{"ok", "cloud-retry-after", "backoff"} {
		q.Add(k)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		ready := len(calls["cloud-retry-after"]) == 2 && len(calls["backoff"]) == 4
		mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls = %v", calls)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(calls["ok"]) != 1 {
		t.Errorf("ok synced %d times", len(calls["ok"]))
	}
	if gap := calls["cloud-retry-after"][1].Sub(calls["cloud-retry-after"][0]); gap < 300*time.Millisecond || gap > 700*time.Millisecond {
		t.Errorf("retry-after honoured with a gap of %v, want ~300ms", gap)
	}
	b := calls["backoff"]
	if g1, g3 := b[1].Sub(b[0]), b[3].Sub(b[2]); g3 <= g1 {
		t.Errorf("backoff does not grow: %v then %v", g1, g3)
	}
}

func TestClampRetryAfter(t *testing.T) {
	cases := []struct {
		d     time.Duration
		asked bool
		want  time.Duration
		ok    bool
	}{
		{0, false, 0, false},
		{time.Second, false, 0, false},
		{0, true, 0, false},
		{-5 * time.Second, true, 0, false},
		{time.Millisecond, true, MinRetryAfter, true},
		{3 * time.Second, true, 3 * time.Second, true},
		{48 * time.Hour, true, MaxRetryAfter, true},
	}
	for _, tc := range cases {
		got, ok := ClampRetryAfter(tc.d, tc.asked)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ClampRetryAfter(%v, %v) = %v, %v; want %v, %v", tc.d, tc.asked, got, ok, tc.want, tc.ok)
		}
	}
	// Through the error contract: a cloud asking for 0 or a negative delay
	// gets backoff, not a fixed immediate retry.
	if _, fixed := retryDelay(cloud.RetryAfter(0, "now")); fixed {
		t.Error("Retry-After 0 taken as a fixed delay")
	}
	if d, fixed := retryDelay(cloud.RetryAfter(time.Nanosecond, "soon")); !fixed || d != MinRetryAfter {
		t.Errorf("Retry-After 1ns: %v %v", d, fixed)
	}
}
