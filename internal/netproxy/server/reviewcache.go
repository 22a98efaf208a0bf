package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"
)

// errReviewsBusy refuses a stream whose token needs a review while the
// bound of reviews in flight is reached: failing fast (the agent retries
// with backoff) keeps a flood from queueing without bound in the server,
// and from spending the apiserver's capacity.
var errReviewsBusy = reviewUnavailable{errors.New("too many token reviews in flight (--token-review-max-in-flight); retry later")}

// reviewUnavailable marks an error that says nothing about the token (the
// server is busy, the apiserver failed or timed out): the stream is
// refused with Unavailable, not Unauthenticated, and nothing is cached.
type reviewUnavailable struct{ err error }

func (e reviewUnavailable) Error() string { return e.err.Error() }
func (e reviewUnavailable) Unwrap() error { return e.err }

// IsUnavailable tells whether err is a review that could not be made, as
// opposed to one that denied the token.
func IsUnavailable(err error) bool { return errors.As(err, new(reviewUnavailable)) }

type reviewResult struct {
	p   Principal
	err error
}

type reviewEntry struct {
	res   reviewResult
	until time.Time
}

// reviewCall is a review in flight; callers with the same token wait for
// it instead of sending their own.
type reviewCall struct {
	done chan struct{}
	res  reviewResult
}

// reviewer caches reviews by the token's SHA-256 (the cache never holds a
// token) and shares the one in flight for each token.
type reviewer struct {
	mu        sync.Mutex
	cache     map[[sha256.Size]byte]reviewEntry
	calls     map[[sha256.Size]byte]*reviewCall
	sem       chan struct{}
	lastSweep time.Time
}

func newReviewer(maxInFlight int) *reviewer {
	if maxInFlight <= 0 {
		maxInFlight = DefaultReviewMaxInFlight
	}
	return &reviewer{cache: map[[sha256.Size]byte]reviewEntry{}, calls: map[[sha256.Size]byte]*reviewCall{},
		sem: make(chan struct{}, maxInFlight)}
}

// do answers tok from the cache, from the review in flight for it, or by
// running review (bounded by the semaphore). The review runs apart from
// ctx, with its own timeout, so a caller going away does not fail the
// others waiting for the same token.
func (a *TokenAuth) do(ctx context.Context, tok string, review func(context.Context) (Principal, string, error)) (Principal, error) {
	rv := a.reviewer()
	key := sha256.Sum256([]byte(tok))
	now := time.Now()
	rv.mu.Lock()
	if e, ok := rv.cache[key]; ok && now.Before(e.until) {
		rv.mu.Unlock()
		a.observe(func(m *metrics) { m.reviewCacheHits.Inc() })
		return e.res.p, e.res.err
	}
	c, shared := rv.calls[key]
	if !shared {
		select {
		case rv.sem <- struct{}{}:
		default:
			rv.mu.Unlock()
			a.observe(func(m *metrics) { m.streamsRefused.WithLabelValues(refusedReviewsBusy).Inc() })
			return Principal{}, errReviewsBusy
		}
		c = &reviewCall{done: make(chan struct{})}
		rv.calls[key] = c
	}
	rv.mu.Unlock()
	if !shared {
		go a.run(rv, key, c, tok, review)
	} else {
		a.observe(func(m *metrics) { m.reviewShared.Inc() })
	}
	select {
	case <-c.done:
		return c.res.p, c.res.err
	case <-ctx.Done():
		return Principal{}, reviewUnavailable{ctx.Err()}
	}
}

func (a *TokenAuth) run(rv *reviewer, key [sha256.Size]byte, c *reviewCall, tok string, review func(context.Context) (Principal, string, error)) {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultReviewTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p, outcome, err := review(ctx)
	cancel()
	<-rv.sem
	if outcome == reviewError {
		err = reviewUnavailable{err}
	}
	a.observe(func(m *metrics) { m.tokenReviews.WithLabelValues(outcome).Inc() })
	c.res = reviewResult{p, err}
	now := time.Now()
	ttl, denialTTL := a.CacheTTL, a.DenialTTL
	if ttl == 0 {
		ttl = DefaultReviewCacheTTL
	}
	if denialTTL == 0 {
		denialTTL = DefaultReviewDenialTTL
	}
	until, cache := reviewCacheUntil(outcome, now, tokenExpiry(tok), ttl, denialTTL)
	rv.mu.Lock()
	delete(rv.calls, key)
	if cache {
		rv.cache[key] = reviewEntry{c.res, until}
	}
	// Entries are added only by reviews, which the semaphore and the
	// client's QPS bound, so sweeping once a second keeps the map small.
	if now.Sub(rv.lastSweep) > time.Second {
		rv.lastSweep = now
		for k, e := range rv.cache {
			if !now.Before(e.until) {
				delete(rv.cache, k)
			}
		}
	}
	rv.mu.Unlock()
	close(c.done)
}

func (a *TokenAuth) reviewer() *reviewer {
	a.once.Do(func() { a.rv = newReviewer(a.MaxInFlight) })
	return a.rv
}

func (a *TokenAuth) observe(f func(*metrics)) {
	if m := a.m.Load(); m != nil {
		f(m)
	}
}
