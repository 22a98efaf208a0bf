package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// reviewer is a kubernetes.Interface that answers only TokenReviews and
// SubjectAccessReviews, with functions of the test's, concurrently (the
// fake clientset runs reactors under one lock, which would serialize the
// concurrent reviews these tests are about).
type reviewer struct {
	kubernetes.Interface // nil: any other call panics
	tokenReview          func(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error)
	access               func(ctx context.Context, user string) (bool, error)
	// accessSpec, when set, decides instead of access, on the whole review.
	accessSpec         func(authzv1.SubjectAccessReviewSpec) bool
	tokenReviews, sars atomic.Int32
	mu                 sync.Mutex
	specs              []authzv1.SubjectAccessReviewSpec // every review asked
}

type authnAPI struct {
	authnclient.AuthenticationV1Interface
	r *reviewer
}
type authzAPI struct {
	authzclient.AuthorizationV1Interface
	r *reviewer
}
type tokenReviews struct {
	authnclient.TokenReviewInterface
	r *reviewer
}
type sars struct {
	authzclient.SubjectAccessReviewInterface
	r *reviewer
}

func (r *reviewer) AuthenticationV1() authnclient.AuthenticationV1Interface { return authnAPI{r: r} }
func (r *reviewer) AuthorizationV1() authzclient.AuthorizationV1Interface   { return authzAPI{r: r} }
func (a authnAPI) TokenReviews() authnclient.TokenReviewInterface           { return tokenReviews{r: a.r} }
func (a authzAPI) SubjectAccessReviews() authzclient.SubjectAccessReviewInterface {
	return sars{r: a.r}
}

func (t tokenReviews) Create(ctx context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	t.r.tokenReviews.Add(1)
	st, err := t.r.tokenReview(ctx, tr.Spec.Token)
	if err != nil {
		return nil, err
	}
	return &authnv1.TokenReview{Status: *st}, nil
}

func (s sars) Create(ctx context.Context, sar *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	s.r.sars.Add(1)
	s.r.mu.Lock()
	s.r.specs = append(s.r.specs, sar.Spec)
	s.r.mu.Unlock()
	if s.r.accessSpec != nil {
		return &authzv1.SubjectAccessReview{Status: authzv1.SubjectAccessReviewStatus{Allowed: s.r.accessSpec(sar.Spec)}}, nil
	}
	ok, err := s.r.access(ctx, sar.Spec.User)
	if err != nil {
		return nil, err
	}
	return &authzv1.SubjectAccessReview{Status: authzv1.SubjectAccessReviewStatus{Allowed: ok}}, nil
}

// scraperReviewer knows one token, "scraper", of a user allowed /metrics.
func scraperReviewer() *reviewer {
	return &reviewer{
		tokenReview: func(_ context.Context, token string) (*authnv1.TokenReviewStatus, error) {
			if token == "scraper" {
				return &authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "prometheus"}}, nil
			}
			return &authnv1.TokenReviewStatus{}, nil
		},
		access: func(context.Context, string) (bool, error) { return true, nil },
	}
}

// get sends GET /metrics with a bearer token through the auth wrapper.
func get(a *delegatedAuth, token string) *httptest.ResponseRecorder {
	h := a.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAuthConcurrentSameTokenIsReviewedOnce(t *testing.T) {
	r := scraperReviewer()
	release := make(chan struct{})
	allowed := r.tokenReview
	r.tokenReview = func(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error) {
		<-release
		return allowed(ctx, token)
	}
	a := newDelegatedAuth(r, nil)
	const n = 100
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = get(a, "scraper").Code
		}()
	}
	// All but one wait for the review the first one started.
	waitFor(t, "requests to join the review in flight", func() bool { return a.waiting.Load() == n-1 })
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("request %d: %d", i, c)
		}
	}
	if tr, sar := r.tokenReviews.Load(), r.sars.Load(); tr != 1 || sar != 1 {
		t.Errorf("%d concurrent requests made %d TokenReviews and %d SubjectAccessReviews, want 1 and 1", n, tr, sar)
	}
	// And the answer is cached.
	if c := get(a, "scraper").Code; c != http.StatusOK || r.tokenReviews.Load() != 1 {
		t.Errorf("cached: %d, TokenReviews %d", c, r.tokenReviews.Load())
	}
}

// TestAuthAsksForTheRequest: the SubjectAccessReview is about the token's
// user and this request (its path, its method as a verb, HEAD as get); a
// user the apiserver denies gets 403, cached; and a decision is for its
// path and verb only: a token allowed GET /metrics is asked about anything
// else afresh. (The other tests' reviewer allows everything, whatever is
// asked.)
func TestAuthAsksForTheRequest(t *testing.T) {
	r := scraperReviewer()
	r.tokenReview = func(_ context.Context, token string) (*authnv1.TokenReviewStatus, error) {
		if token == "scraper" || token == "intruder" {
			return &authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: token, Groups: []string{"team:" + token}}}, nil
		}
		return &authnv1.TokenReviewStatus{}, nil
	}
	r.accessSpec = func(s authzv1.SubjectAccessReviewSpec) bool {
		return s.User == "scraper" && s.NonResourceAttributes != nil && *s.NonResourceAttributes == authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}
	}
	a := newDelegatedAuth(r, nil)
	do := func(method, path, token string) *httptest.ResponseRecorder {
		h := a.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) }))
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	lastSpec := func() authzv1.SubjectAccessReviewSpec {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.specs) == 0 {
			t.Fatal("no SubjectAccessReview asked")
		}
		return r.specs[len(r.specs)-1]
	}

	if rec := do("GET", "/metrics", "scraper"); rec.Code != http.StatusOK {
		t.Fatalf("scraper GET /metrics: %d %q", rec.Code, rec.Body.String())
	}
	if s := lastSpec(); s.User != "scraper" || !slices.Equal(s.Groups, []string{"team:scraper"}) || s.ResourceAttributes != nil {
		t.Errorf("review asked %+v, want the token's user and groups, non-resource", s)
	}
	if rec := do("HEAD", "/metrics", "scraper"); rec.Code != http.StatusOK {
		t.Errorf("scraper HEAD /metrics (asked as get): %d", rec.Code)
	}
	for _, tc := range []struct{ method, path, token, verb string }{
		{"GET", "/metrics", "intruder", "get"},
		{"GET", "/debug/pprof/", "scraper", "get"},
		{"POST", "/metrics", "scraper", "post"},
	} {
		before := r.sars.Load()
		rec := do(tc.method, tc.path, tc.token)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "may not "+tc.verb+" "+tc.path) {
			t.Errorf("%s %s %s: %d %q, want 403", tc.token, tc.method, tc.path, rec.Code, rec.Body.String())
		}
		if r.sars.Load() != before+1 {
			t.Errorf("%s %s %s: answered from another request's decision (%d reviews, want %d)", tc.token, tc.method, tc.path, r.sars.Load(), before+1)
			continue
		}
		if s := lastSpec(); s.User != tc.token || s.NonResourceAttributes == nil || s.NonResourceAttributes.Path != tc.path || s.NonResourceAttributes.Verb != tc.verb {
			t.Errorf("%s %s %s: review asked %+v", tc.token, tc.method, tc.path, s)
		}
		// The denial is definitive: cached.
		if rec := do(tc.method, tc.path, tc.token); rec.Code != http.StatusForbidden || r.sars.Load() != before+1 {
			t.Errorf("%s %s %s again: %d after %d reviews, want 403 from the cache", tc.token, tc.method, tc.path, rec.Code, r.sars.Load()-before)
		}
	}
}

func TestAuthTransientErrorsAreNotCached(t *testing.T) {
	gr := schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}
	transient := []error{
		apierrors.NewInternalError(errors.New("etcd is sad")),
		apierrors.NewTooManyRequests("slow down", 1),
		apierrors.NewServiceUnavailable("starting"),
		apierrors.NewTimeoutError("timeout", 1),
		fmt.Errorf("client rate limiter Wait returned an error: %w", context.DeadlineExceeded),
		errors.New("dial tcp 10.0.0.1:443: connect: connection refused"),
	}
	var mu sync.Mutex
	var next error
	r := scraperReviewer()
	r.tokenReview = func(_ context.Context, token string) (*authnv1.TokenReviewStatus, error) {
		mu.Lock()
		defer mu.Unlock()
		if next != nil {
			return nil, next
		}
		return &authnv1.TokenReviewStatus{Authenticated: token == "scraper", User: authnv1.UserInfo{Username: "prometheus"}}, nil
	}
	set := func(err error) { mu.Lock(); next = err; mu.Unlock() }
	a := newDelegatedAuth(r, nil)

	for i, err := range transient {
		set(err)
		rec := get(a, "random")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%v: %d %q Retry-After=%q, want 503 with Retry-After", err, rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
		}
		if got := r.tokenReviews.Load(); got != int32(i+1) {
			t.Errorf("%v: an earlier error was cached: %d TokenReviews after %d requests", err, got, i+1)
		}
	}
	// The CCM's own missing permission: 500, said plainly, not cached.
	set(apierrors.NewForbidden(gr, "", errors.New("no")))
	if rec := get(a, "random"); rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "system:auth-delegator") {
		t.Errorf("forbidden TokenReview: %d %q", rec.Code, rec.Body.String())
	}
	// The apiserver answers again: the same token is reviewed, and the
	// definitive denial is cached.
	set(nil)
	before := r.tokenReviews.Load()
	if rec := get(a, "random"); rec.Code != http.StatusUnauthorized {
		t.Errorf("after the errors: %d %q, want 401", rec.Code, rec.Body.String())
	}
	if rec := get(a, "random"); rec.Code != http.StatusUnauthorized {
		t.Errorf("cached denial: %d", rec.Code)
	}
	if got := r.tokenReviews.Load() - before; got != 1 {
		t.Errorf("definitive denial reviewed %d times, want 1 (cached)", got)
	}

	// SubjectAccessReview errors are not cached as denials either.
	var sarErr atomic.Pointer[error]
	allowed := atomic.Bool{}
	r.access = func(context.Context, string) (bool, error) {
		if p := sarErr.Load(); p != nil {
			return false, *p
		}
		return allowed.Load(), nil
	}
	e := error(apierrors.NewTooManyRequests("slow down", 1))
	sarErr.Store(&e)
	if rec := get(a, "scraper"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("SubjectAccessReview error: %d %q, want 503", rec.Code, rec.Body.String())
	}
	sarErr.Store(nil)
	allowed.Store(true)
	if rec := get(a, "scraper"); rec.Code != http.StatusOK {
		t.Errorf("after the SubjectAccessReview error: %d %q, want 200", rec.Code, rec.Body.String())
	}
	if got := r.sars.Load(); got != 2 {
		t.Errorf("SubjectAccessReviews = %d, want 2 (the error not cached)", got)
	}
}

func TestAuthReviewTimeoutIsNotCached(t *testing.T) {
	r := scraperReviewer()
	var slow atomic.Bool
	slow.Store(true)
	r.tokenReview = func(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error) {
		if slow.Load() {
			<-ctx.Done() // the apiserver never answers
			return nil, ctx.Err()
		}
		return &authnv1.TokenReviewStatus{Authenticated: token == "scraper"}, nil
	}
	a := newDelegatedAuth(r, nil)
	a.reviewTimeout = 50 * time.Millisecond
	start := time.Now()
	if rec := get(a, "scraper"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("timed-out review: %d, want 503", rec.Code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a timed-out review took %v", d)
	}
	slow.Store(false)
	if rec := get(a, "scraper"); rec.Code != http.StatusOK {
		t.Errorf("after a timeout: %d %q, want 200", rec.Code, rec.Body.String())
	}
}

func TestAuthCacheIsBounded(t *testing.T) {
	r := scraperReviewer()
	a := newDelegatedAuth(r, nil)
	clock := time.Now()
	var clockMu sync.Mutex
	a.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }

	if c := get(a, "scraper").Code; c != http.StatusOK {
		t.Fatalf("scraper: %d", c)
	}
	// A flood of made-up tokens, 3 times the cache's size.
	for i := range 3 * authDeniedCacheSize {
		if c := get(a, fmt.Sprintf("random-%d", i)).Code; c != http.StatusUnauthorized {
			t.Fatalf("random token: %d", c)
		}
	}
	if n := a.denied.len(); n > authDeniedCacheSize || len(a.denied.items) != n {
		t.Errorf("denied cache holds %d entries (map %d), bound %d", n, len(a.denied.items), authDeniedCacheSize)
	}
	if len(a.inflight) != 0 {
		t.Errorf("%d calls left in flight", len(a.inflight))
	}
	// The flood did not evict the scraper's decision.
	reviews := r.tokenReviews.Load()
	if c := get(a, "scraper").Code; c != http.StatusOK || r.tokenReviews.Load() != reviews {
		t.Errorf("scraper after the flood: %d, %d new TokenReviews (want 0: cached)", c, r.tokenReviews.Load()-reviews)
	}
	// The most recent made-up token is still cached, the first was evicted.
	if get(a, fmt.Sprintf("random-%d", 3*authDeniedCacheSize-1)); r.tokenReviews.Load() != reviews {
		t.Errorf("recent denial not cached")
	}
	if get(a, "random-0"); r.tokenReviews.Load() != reviews+1 {
		t.Errorf("oldest denial still cached")
	}
	// Decisions expire.
	advance(authCacheTTL)
	if c := get(a, "scraper").Code; c != http.StatusOK || r.tokenReviews.Load() != reviews+2 {
		t.Errorf("expired decision not reviewed again: %d, %d TokenReviews", c, r.tokenReviews.Load())
	}
}

func TestAuthReviewsInFlightAreCapped(t *testing.T) {
	r := scraperReviewer()
	release := make(chan struct{})
	r.tokenReview = func(_ context.Context, token string) (*authnv1.TokenReviewStatus, error) {
		if strings.HasPrefix(token, "slow") {
			<-release
		}
		return &authnv1.TokenReviewStatus{}, nil
	}
	a := newDelegatedAuth(r, nil)
	a.slots = make(chan struct{}, 2)
	a.slotWait = 20 * time.Millisecond
	var wg sync.WaitGroup
	for _, tok := range []string{"slow-1", "slow-2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c := get(a, tok).Code; c != http.StatusUnauthorized {
				t.Errorf("%s: %d", tok, c)
			}
		}()
	}
	waitFor(t, "two reviews in flight", func() bool { return r.tokenReviews.Load() == 2 })
	rec := get(a, "other")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a third review while 2 slots are taken: %d %q Retry-After=%q, want 429", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	if got := r.tokenReviews.Load(); got != 2 {
		t.Errorf("TokenReviews = %d, want 2", got)
	}
	close(release)
	wg.Wait()
	// The 429 was not cached: a free slot reviews the token.
	if c := get(a, "other").Code; c != http.StatusUnauthorized || r.tokenReviews.Load() != 3 {
		t.Errorf("after the slots freed: %d, %d TokenReviews", c, r.tokenReviews.Load())
	}
}

func TestAuthClientIsSeparate(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 200, Burst: 400, UserAgent: "portside-ccm"}
	c := authClientConfig(base)
	if c.QPS != authQPS || c.Burst != authBurst || c.RateLimiter != nil {
		t.Errorf("QPS/Burst = %v/%v, RateLimiter %v", c.QPS, c.Burst, c.RateLimiter)
	}
	if c.UserAgent != "portside-ccm/auth" {
		t.Errorf("UserAgent = %q", c.UserAgent)
	}
	if c.Dial == nil {
		t.Error("no dial function of its own: the transport would be shared")
	}
	if base.QPS != 200 || base.UserAgent != "portside-ccm" || base.Dial != nil {
		t.Errorf("the CCM's config was changed: %+v", base)
	}
	if _, err := kubernetes.NewForConfig(c); err != nil {
		t.Fatal(err)
	}
}
