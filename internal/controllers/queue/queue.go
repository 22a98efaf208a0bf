// Package queue is the shell every Portside controller shares: a typed,
// named, rate-limited workqueue of keys, N workers, and the three-way error
// contract of a sync function:
//
//   - nil: done; the key's backoff is forgotten;
//   - an error carrying a retry-after delay (cloud.RetryAfterError, or
//     RetryAfter): the key is retried after exactly that delay;
//   - any other error: the key is retried with per-key exponential backoff.
package queue

import (
	"context"
	"errors"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud"
)

// Queue is a named queue of string keys.
type Queue = workqueue.TypedRateLimitingInterface[string]

// New returns a named queue with per-key exponential backoff from base to
// max; the name labels the workqueue_* metrics.
func New(name string, base, max time.Duration) Queue {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// requeueAfter is an error asking for a retry after a fixed delay.
type requeueAfter struct {
	after time.Duration
	err   error
}

func (r *requeueAfter) Error() string { return r.err.Error() }
func (r *requeueAfter) Unwrap() error { return r.err }

// RetryAfter wraps err to be retried after d instead of with backoff.
func RetryAfter(d time.Duration, err error) error { return &requeueAfter{after: d, err: err} }

// Bounds on a delay a cloud asks for: a Retry-After of a few milliseconds
// must not make a hot loop, nor one of a day park a Service for a day.
const (
	MinRetryAfter = 100 * time.Millisecond
	MaxRetryAfter = 10 * time.Minute
)

// retryDelay returns the fixed retry delay err asks for, if any, clamped to
// [MinRetryAfter, MaxRetryAfter]. A zero or negative delay is no usable
// answer: the key gets the ordinary backoff.
func retryDelay(err error) (time.Duration, bool) {
	var (
		d     time.Duration
		fixed bool
	)
	var r *requeueAfter
	if errors.As(err, &r) {
		d, fixed = r.after, true
	} else {
		d, fixed = cloud.IsRetryAfter(err)
	}
	return ClampRetryAfter(d, fixed)
}

// ClampRetryAfter bounds a retry-after delay; ok is false when the delay is
// not usable (none, zero or negative) and backoff applies instead.
func ClampRetryAfter(d time.Duration, asked bool) (time.Duration, bool) {
	switch {
	case !asked || d <= 0:
		return 0, false
	case d < MinRetryAfter:
		return MinRetryAfter, true
	case d > MaxRetryAfter:
		return MaxRetryAfter, true
	}
	return d, true
}

// Run starts workers that process q with sync until ctx is done, then
// shuts the queue down and waits for them.
func Run(ctx context.Context, q Queue, workers int, sync func(ctx context.Context, key string) error) {
	defer q.ShutDown()
	logger := klog.FromContext(ctx)
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx, q, sync, logger) {
				}
			}, time.Second)
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	for range workers {
		<-done
	}
}

func processNext(ctx context.Context, q Queue, sync func(context.Context, string) error, logger klog.Logger) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	defer utilruntime.HandleCrashWithContext(ctx)
	err := sync(ctx, key)
	switch d, fixed := retryDelay(err); {
	case err == nil:
		q.Forget(key)
	case fixed:
		q.Forget(key)
		q.AddAfter(key, d)
		logger.V(2).Info("Retrying after the delay asked for", "key", key, "after", d, "err", err)
	default:
		q.AddRateLimited(key)
		logger.V(2).Info("Retrying with backoff", "key", key, "retries", q.NumRequeues(key), "err", err)
	}
	return true
}

// Untombstone returns the object of a delete event, which the informer
// hands over wrapped when it missed the delete itself.
func Untombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
