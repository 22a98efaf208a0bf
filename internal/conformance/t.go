package conformance

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
)

// T is a running test's handle, like testing.T: failures, logs, clean-up.
type T struct {
	Env *Env
	// Name is the test's name.
	Name string

	mu       sync.Mutex
	failed   bool
	skipped  bool
	messages []string
	logs     []string
	cleanups []func(ctx context.Context)
}

// Errorf records a failure and lets the test go on.
func (t *T) Errorf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	t.messages = append(t.messages, fmt.Sprintf(format, args...))
}

// Fatalf records a failure and ends the test (its clean-ups still run).
// Call it only from the test's goroutine.
func (t *T) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

// Skipf ends the test as skipped, with the reason.
func (t *T) Skipf(format string, args ...any) {
	t.mu.Lock()
	t.skipped = true
	t.messages = append(t.messages, fmt.Sprintf(format, args...))
	t.mu.Unlock()
	runtime.Goexit()
}

// Logf records a line shown with the test's result (-v) and in JUnit.
func (t *T) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.logs = append(t.logs, fmt.Sprintf(format, args...))
}

// Cleanup registers f to run after the test, last registered first, also
// when it fails, times out or the run is interrupted, with a context of
// its own (CleanupTimeout).
func (t *T) Cleanup(f func(ctx context.Context)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// CleanupTimeout bounds a test's clean-ups together.
const CleanupTimeout = 2 * time.Minute

// Failed reports whether the test has failed so far.
func (t *T) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// Eventually polls cond every pollInterval until it holds; after timeout
// (or when ctx ends) the test fails with what and cond's last detail.
func (t *T) Eventually(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (ok bool, detail string)) {
	if m := t.Env.MaxWait; m > 0 && timeout > m {
		timeout = m
	}
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, detail := cond(ctx)
		if ok {
			return
		}
		if detail != "" {
			last = detail
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

const pollInterval = 250 * time.Millisecond

// runCleanups runs the registered clean-ups, last first.
func (t *T) runCleanups() {
	ctx, cancel := context.WithTimeout(context.Background(), CleanupTimeout)
	defer cancel()
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i](ctx)
	}
}

// message is the test's failure or skip text, one line per message.
func (t *T) message() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.messages, "\n")
}
