package manager

import (
	"container/list"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// delegatedAuth protects the serving endpoints as upstream's controller
// managers do: a bearer token is checked with a TokenReview, then the
// request with a SubjectAccessReview (non-resource URL, verb from the HTTP
// method). Paths in --authorization-always-allow-paths (the health checks
// by default) are open.
//
// /metrics is reachable by anyone who can reach the port, so a flood of
// requests with made-up tokens must not hurt the CCM's real work:
//   - reviews go through their own client (own rate limiter, own
//     connection, user agent ".../auth"), never the one that renews the
//     leader Lease and runs the controllers;
//   - concurrent requests with the same token, verb and path share one
//     review;
//   - at most maxInFlight reviews run at once; a request that finds no free
//     slot within slotWait gets 429 with Retry-After;
//   - only definitive answers (not authenticated, not allowed, allowed) are
//     cached, for authCacheTTL, in two bounded LRU caches (so made-up tokens
//     can neither grow memory nor evict a scraper's decision); errors
//     (timeouts, 429, 5xx) give 503 and the next request asks again.
type delegatedAuth struct {
	client kubernetes.Interface
	allow  []string

	ttl           time.Duration
	reviewTimeout time.Duration
	slotWait      time.Duration
	slots         chan struct{}
	now           func() time.Time

	mu       sync.Mutex
	allowed  *lruCache // decisions that let the request through
	denied   *lruCache // 401/403 decisions
	inflight map[[32]byte]*authCall

	// waiting counts requests waiting for another request's review.
	waiting atomic.Int32
	logs    logThrottle
}

type authDecision struct {
	status     int // 0: allowed
	message    string
	retryAfter bool // transient: the client may retry soon
}

// authCall is one review in flight, shared by the requests that need it.
type authCall struct {
	done chan struct{}
	d    authDecision
}

const (
	authCacheTTL = 10 * time.Second
	// Bounds of the decision caches; an entry is ~200 bytes.
	authAllowedCacheSize = 1024
	authDeniedCacheSize  = 4096
	// Reviews in flight at once; more wait up to authSlotWait, then get 429.
	authMaxInFlight = 16
	authSlotWait    = 500 * time.Millisecond
	// authReviewTimeout bounds a review (TokenReview and SubjectAccessReview
	// with the client-side rate limiter's wait).
	authReviewTimeout = 10 * time.Second
	// The review client's own limits: well below the controllers' client,
	// enough for scrapers (their decisions are cached).
	authQPS   = 20
	authBurst = 40
)

func newDelegatedAuth(client kubernetes.Interface, allow []string) *delegatedAuth {
	return &delegatedAuth{
		client: client, allow: allow,
		ttl: authCacheTTL, reviewTimeout: authReviewTimeout, slotWait: authSlotWait,
		slots: make(chan struct{}, authMaxInFlight), now: time.Now,
		allowed: newLRU(authAllowedCacheSize), denied: newLRU(authDeniedCacheSize),
		inflight: map[[32]byte]*authCall{},
	}
}

// authClientConfig derives the review client's configuration from the
// CCM's: its own rate limiter and connection, so that reviews never queue
// behind, or in front of, Lease renewals and controller requests.
func authClientConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = authQPS, authBurst, nil
	ua := c.UserAgent
	if ua == "" {
		ua = rest.DefaultKubernetesUserAgent()
	}
	c.UserAgent = ua + "/auth"
	c.Timeout = authReviewTimeout
	if c.Dial == nil {
		// A dial function of its own makes client-go build a transport
		// (and HTTP/2 connection) of its own instead of sharing the cached one.
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return c
}

func (a *delegatedAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(a.allow, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "Unauthorized: send a bearer token of a user allowed to get "+r.URL.Path, http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(r.Method)
		if verb == "head" {
			verb = "get"
		}
		d := a.decide(r.Context(), token, verb, r.URL.Path)
		if d.status != 0 {
			if d.retryAfter {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, d.message, d.status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *delegatedAuth) decide(ctx context.Context, token, verb, path string) authDecision {
	key := sha256.Sum256([]byte(token + "\x00" + verb + "\x00" + path))
	now := a.now()
	a.mu.Lock()
	if d, ok := a.allowed.get(key, now); ok {
		a.mu.Unlock()
		return d
	}
	if d, ok := a.denied.get(key, now); ok {
		a.mu.Unlock()
		return d
	}
	if c, ok := a.inflight[key]; ok {
		a.mu.Unlock()
		a.waiting.Add(1)
		defer a.waiting.Add(-1)
		select {
		case <-c.done:
			return c.d
		case <-ctx.Done():
			return authDecision{status: http.StatusServiceUnavailable, message: "Service Unavailable: the request ended before its token was reviewed", retryAfter: true}
		}
	}
	c := &authCall{done: make(chan struct{})}
	a.inflight[key] = c
	a.mu.Unlock()

	// The deferred part also runs if the review panics, so that no request
	// waits forever on a call that never ends.
	c.d = authDecision{status: http.StatusInternalServerError, message: "Internal Server Error: the token review failed"}
	definitive := false
	defer func() {
		a.mu.Lock()
		delete(a.inflight, key)
		if definitive {
			expires := a.now().Add(a.ttl)
			if c.d.status == 0 {
				a.allowed.add(key, c.d, expires)
			} else {
				a.denied.add(key, c.d, expires)
			}
		}
		a.mu.Unlock()
		close(c.done)
	}()
	c.d, definitive = a.reviewInSlot(ctx, token, verb, path)
	return c.d
}

// reviewInSlot waits briefly for one of the review slots, then reviews.
// The review is not cancelled when the request ends: others may share it.
func (a *delegatedAuth) reviewInSlot(ctx context.Context, token, verb, path string) (authDecision, bool) {
	timer := time.NewTimer(a.slotWait)
	defer timer.Stop()
	select {
	case a.slots <- struct{}{}:
	case <-timer.C:
		a.logs.log(ctx, "busy", nil, "Too many token reviews in flight; answering 429", "inFlight", cap(a.slots))
		return authDecision{status: http.StatusTooManyRequests, message: "Too Many Requests: too many tokens are being reviewed; retry later", retryAfter: true}, false
	case <-ctx.Done():
		return authDecision{status: http.StatusServiceUnavailable, message: "Service Unavailable: the request ended before its token was reviewed", retryAfter: true}, false
	}
	defer func() { <-a.slots }()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.reviewTimeout)
	defer cancel()
	return a.review(rctx, token, verb, path)
}

// review asks the apiserver. definitive is false when the apiserver gave no
// answer (error): such a decision must not be cached.
func (a *delegatedAuth) review(ctx context.Context, token, verb, path string) (d authDecision, definitive bool) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return a.reviewError(ctx, "TokenReview", err), false
	}
	if !tr.Status.Authenticated {
		return authDecision{status: http.StatusUnauthorized, message: "Unauthorized: the token is not valid"}, true
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return a.reviewError(ctx, "SubjectAccessReview", err), false
	}
	if !sar.Status.Allowed {
		return authDecision{status: http.StatusForbidden, message: fmt.Sprintf("Forbidden: user %q may not %s %s (grant it with a ClusterRole rule on nonResourceURLs)", u.Username, verb, path)}, true
	}
	return authDecision{}, true
}

// reviewError turns a failed review into an answer that is not cached: 500
// when the CCM itself may not create reviews (a setup error an operator must
// fix), 503 with Retry-After otherwise (timeouts, throttling, 5xx).
func (a *delegatedAuth) reviewError(ctx context.Context, kind string, err error) authDecision {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		a.logs.log(ctx, "forbidden-"+kind, err, "The CCM may not create "+kind+"s: grant its identity the system:auth-delegator ClusterRole")
		return authDecision{status: http.StatusInternalServerError, message: "Internal Server Error: the CCM may not create " + kind + "s (grant it system:auth-delegator)"}
	}
	a.logs.log(ctx, "error-"+kind, err, kind+" failed; answering 503")
	return authDecision{status: http.StatusServiceUnavailable, message: "Service Unavailable: the token could not be reviewed now; retry later", retryAfter: true}
}

// logThrottle logs each kind of message at most once per logEvery, with
// how many were suppressed since, so a flood of requests does not flood
// the log.
type logThrottle struct {
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

const logEvery = 10 * time.Second

func (l *logThrottle) log(ctx context.Context, kind string, err error, msg string, kv ...any) {
	l.mu.Lock()
	if l.last == nil {
		l.last, l.count = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if t, ok := l.last[kind]; ok && now.Sub(t) < logEvery {
		l.count[kind]++
		l.mu.Unlock()
		return
	}
	suppressed := l.count[kind]
	l.last[kind], l.count[kind] = now, 0
	l.mu.Unlock()
	kv = append(kv, "suppressedSinceLastLog", suppressed)
	if err != nil {
		klog.FromContext(ctx).Error(err, msg, kv...)
	} else {
		klog.FromContext(ctx).Info(msg, kv...)
	}
}

// lruCache is a bounded cache of decisions with expiry; not safe for
// concurrent use (delegatedAuth.mu guards it).
type lruCache struct {
	max   int
	order *list.List // front: most recently used
	items map[[32]byte]*list.Element
}

type lruEntry struct {
	key     [32]byte
	d       authDecision
	expires time.Time
}

func newLRU(max int) *lruCache {
	return &lruCache{max: max, order: list.New(), items: map[[32]byte]*list.Element{}}
}

func (c *lruCache) get(key [32]byte, now time.Time) (authDecision, bool) {
	e, ok := c.items[key]
	if !ok {
		return authDecision{}, false
	}
	ent := e.Value.(*lruEntry)
	if !now.Before(ent.expires) {
		c.order.Remove(e)
		delete(c.items, key)
		return authDecision{}, false
	}
	c.order.MoveToFront(e)
	return ent.d, true
}

func (c *lruCache) add(key [32]byte, d authDecision, expires time.Time) {
	if e, ok := c.items[key]; ok {
		ent := e.Value.(*lruEntry)
		ent.d, ent.expires = d, expires
		c.order.MoveToFront(e)
		return
	}
	c.items[key] = c.order.PushFront(&lruEntry{key: key, d: d, expires: expires})
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*lruEntry).key)
	}
}

func (c *lruCache) len() int { return c.order.Len() }
