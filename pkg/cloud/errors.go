package cloud

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotFound means the cloud object (instance, load balancer, route,
	// volume) does not exist. Providers wrap it: fmt.Errorf("instance %q: %w", id, ErrNotFound).
	ErrNotFound = errors.New("not found")
	// ErrNotImplemented means the provider does not implement the operation.
	ErrNotImplemented = errors.New("not implemented")
)

// RetryAfterError asks the caller to retry after a fixed delay instead of
// its own backoff: the cloud is still working on it, or rate-limited us.
type RetryAfterError struct {
	// After is how long to wait before retrying.
	After time.Duration
	// Reason says why, for events and logs.
	Reason string
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%s (retry after %v)", e.Reason, e.After)
}

// RetryAfter returns an error asking for a retry after d.
func RetryAfter(d time.Duration, format string, args ...any) error {
	return &RetryAfterError{After: d, Reason: fmt.Sprintf(format, args...)}
}

// IsRetryAfter reports whether err (or an error it wraps) asks for a retry
// after a fixed delay, and the delay.
func IsRetryAfter(err error) (time.Duration, bool) {
	var re *RetryAfterError
	if errors.As(err, &re) {
		return re.After, true
	}
	return 0, false
}

// IsNotFound reports whether err means the cloud object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsNotImplemented reports whether err means the operation is not implemented.
func IsNotImplemented(err error) bool { return errors.Is(err, ErrNotImplemented) }

// ErrImplementedElsewhere means another component owns this load balancer
// (upstream's ImplementedElsewhere): the caller does nothing and does not retry.
var ErrImplementedElsewhere = errors.New("implemented by another component")
