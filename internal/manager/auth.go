package manager

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// delegatedAuth protects the serving endpoints as upstream's controller
// managers do: a bearer token is checked with a TokenReview, then the
// request with a SubjectAccessReview (non-resource URL, verb from the HTTP
// method). Paths in --authorization-always-allow-paths (the health checks
// by default) are open. Decisions are cached briefly, so a scraper every
// few seconds costs the apiserver little.
type delegatedAuth struct {
	client kubernetes.Interface
	allow  []string

	mu    sync.Mutex
	cache map[[32]byte]authDecision
}

type authDecision struct {
	status  int // 0: allowed
	message string
	expires time.Time
}

const authCacheTTL = 10 * time.Second

func newDelegatedAuth(client kubernetes.Interface, allow []string) *delegatedAuth {
	return &delegatedAuth{client: client, allow: allow, cache: map[[32]byte]authDecision{}}
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
			http.Error(w, d.message, d.status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *delegatedAuth) decide(ctx context.Context, token, verb, path string) authDecision {
	key := sha256.Sum256([]byte(token + "\x00" + verb + "\x00" + path))
	now := time.Now()
	a.mu.Lock()
	if d, ok := a.cache[key]; ok && now.Before(d.expires) {
		a.mu.Unlock()
		return d
	}
	a.mu.Unlock()
	d := a.review(ctx, token, verb, path)
	d.expires = now.Add(authCacheTTL)
	a.mu.Lock()
	if len(a.cache) > 1024 { // bounded: drop everything rather than track ages
		clear(a.cache)
	}
	a.cache[key] = d
	a.mu.Unlock()
	return d
}

func (a *delegatedAuth) review(ctx context.Context, token, verb, path string) authDecision {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "TokenReview failed")
		return authDecision{status: http.StatusUnauthorized, message: "Unauthorized: the token could not be reviewed"}
	}
	if !tr.Status.Authenticated {
		return authDecision{status: http.StatusUnauthorized, message: "Unauthorized: the token is not valid"}
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
		klog.FromContext(ctx).Error(err, "SubjectAccessReview failed")
		return authDecision{status: http.StatusForbidden, message: "Forbidden: the request could not be authorized"}
	}
	if !sar.Status.Allowed {
		return authDecision{status: http.StatusForbidden, message: fmt.Sprintf("Forbidden: user %q may not %s %s (grant it with a ClusterRole rule on nonResourceURLs)", u.Username, verb, path)}
	}
	return authDecision{}
}
