package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// TokenAuth authenticates agents by their ServiceAccount token with a
// TokenReview, as upstream does with --agent-namespace and
// --agent-service-account. Unlike upstream, reviews are cached per token
// (a hash of it), shared while in flight, bounded in number and time
// (reviewcache.go), so junk tokens on the open agent port cannot spend the
// apiserver's capacity nor delay real agents. Client should have its own
// QPS and burst (Flags does so), so reviews do not starve, nor are starved
// by, the server's other requests.
type TokenAuth struct {
	Namespace      string
	ServiceAccount string
	Audience       string
	Client         kubernetes.Interface

	// MaxInFlight bounds the reviews in flight; a stream that needs one
	// beyond it is refused with Unavailable. Zero: DefaultReviewMaxInFlight.
	MaxInFlight int
	// Timeout bounds one review; zero: DefaultReviewTimeout.
	Timeout time.Duration
	// CacheTTL is how long an authentication answers the same token (never
	// past the token's exp); DenialTTL how long a denial does. Zero takes
	// the defaults; negative disables that cache.
	CacheTTL, DenialTTL time.Duration

	once sync.Once
	rv   *reviewer
	m    atomic.Pointer[metrics]
}

// Authenticate checks the bearer token in the agent's metadata and returns
// who it proves: the ServiceAccount user and, for a pod-bound token, the
// node its pod runs on. An error IsUnavailable when the review could not
// be made.
func (a *TokenAuth) Authenticate(ctx context.Context, md metadata.MD) (Principal, error) {
	tok, err := bearerToken(md)
	if err != nil {
		return Principal{}, err
	}
	if a.Audience == "" {
		// Without an audience any token of the ServiceAccount would do,
		// including one minted for another service; upstream refuses too.
		return Principal{}, errors.New("agent token authentication needs an audience (--authentication-audience)")
	}
	return a.do(ctx, tok, func(ctx context.Context) (Principal, string, error) { return a.review(ctx, tok) })
}

// review asks the apiserver about tok; the outcome says whether the answer
// is about the token (authenticated, denied) or not (error).
func (a *TokenAuth) review(ctx context.Context, tok string) (Principal, string, error) {
	review := &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: tok, Audiences: []string{a.Audience}}}
	r, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return Principal{}, reviewError, fmt.Errorf("token review failed: %w", err)
	}
	if r.Status.Error != "" {
		return Principal{}, reviewDenied, fmt.Errorf("token review error: %s", r.Status.Error)
	}
	if !r.Status.Authenticated {
		return Principal{}, reviewDenied, errors.New("token not authenticated")
	}
	// The audiences the review returns are those the token is valid for
	// among those asked; an authenticator that ignores audiences returns
	// none, and then the token was not checked for ours.
	if !contains(r.Status.Audiences, a.Audience) {
		return Principal{}, reviewDenied, fmt.Errorf("token audiences %v do not include %q (--authentication-audience)", r.Status.Audiences, a.Audience)
	}
	if err := checkServiceAccountUser(r.Status.User.Username, a.Namespace, a.ServiceAccount); err != nil {
		return Principal{}, reviewDenied, err
	}
	p := Principal{User: r.Status.User.Username, Groups: r.Status.User.Groups}
	if n := r.Status.User.Extra[NodeNameExtra]; len(n) == 1 {
		p.Node = n[0]
	}
	return p, reviewAuthenticated, nil
}

func bearerToken(md metadata.MD) (string, error) {
	vals := md.Get(header.AuthenticationTokenContextKey)
	switch {
	case len(vals) == 0:
		return "", errors.New("no bearer token in metadata (Authorization)")
	case len(vals) > 1:
		return "", fmt.Errorf("%d tokens received, want one", len(vals))
	}
	tok, ok := strings.CutPrefix(vals[0], header.AuthenticationTokenContextSchemePrefix)
	if !ok || tok == "" {
		return "", fmt.Errorf("token does not have the %q prefix", header.AuthenticationTokenContextSchemePrefix)
	}
	return tok, nil
}

// checkServiceAccountUser decides whether a reviewed username is the
// expected agent ServiceAccount.
func checkServiceAccountUser(username, namespace, serviceAccount string) error {
	parts := strings.Split(username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return fmt.Errorf("user %q is not a service account", username)
	}
	if parts[2] != namespace || parts[3] != serviceAccount {
		return fmt.Errorf("service account %s/%s is not the agent's %s/%s", parts[2], parts[3], namespace, serviceAccount)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
