package credentialprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/portside-io/portside/pkg/cloud"
)

// Result is a whole answer for one image, for providers that say more than
// one credential can: what upstream plugins say.
//
//   - Several Credentials, one auth entry each (keyed by its Registry), as
//     GCP's plugin answers for "*.gcr.io", "*.pkg.dev" and more at once.
//   - No Credentials: success with no credentials, for an image the
//     provider does not serve. The kubelet pulls without credentials, and
//     caches the answer (CacheDuration, else its defaultCacheDuration) under
//     Scope, so it does not run the plugin for every such pull. An error
//     (ErrNotFound) instead tells the operator matchImages is wrong, and is
//     not cached.
//   - CacheDuration: nil derives it from the credentials' ExpiresAt (else
//     the kubelet's defaultCacheDuration applies); set, it is used as is,
//     in whole seconds, 0 meaning "do not cache", but never longer than the
//     earliest-expiring credential allows. CacheFor makes one.
//   - Scope: how widely the answer is cached; "" is the narrowest of the
//     credentials' scopes (default Registry).
type Result struct {
	Credentials   []cloud.RegistryCredential
	Scope         cloud.CredentialScope
	CacheDuration *time.Duration
}

// CacheFor is a Result.CacheDuration of d; CacheFor(0) is "do not cache".
func CacheFor(d time.Duration) *time.Duration { return &d }

// Responder is a registry-credentials capability that answers with a whole
// Result. Answer, Serve and Main use it when the cloud.RegistryCredentials
// they are given implements it, and RegistryCredential otherwise.
type Responder interface {
	Respond(ctx context.Context, req cloud.RegistryCredentialRequest) (*Result, error)
}

// ResponderFunc is a Responder that can be passed wherever a
// cloud.RegistryCredentials is taken (Main, Serve, Answer).
type ResponderFunc func(ctx context.Context, req cloud.RegistryCredentialRequest) (*Result, error)

// Respond calls f.
func (f ResponderFunc) Respond(ctx context.Context, req cloud.RegistryCredentialRequest) (*Result, error) {
	return f(ctx, req)
}

// RegistryCredential is the Result's only credential, for callers that
// take one; several, or none, are an error saying to use Respond.
func (f ResponderFunc) RegistryCredential(ctx context.Context, req cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	r, err := f(ctx, req)
	if err != nil {
		return nil, err
	}
	if r == nil || len(r.Credentials) != 1 {
		n := 0
		if r != nil {
			n = len(r.Credentials)
		}
		return nil, fmt.Errorf("the provider answered image %s with %d credentials: call Respond for its whole Result", req.Image, n)
	}
	c := r.Credentials[0]
	return &c, nil
}

// respond asks rc for a Result: its own when it is a Responder, else its
// one credential.
func respond(ctx context.Context, rc cloud.RegistryCredentials, req cloud.RegistryCredentialRequest) (*Result, error) {
	if r, ok := rc.(Responder); ok {
		res, err := r.Respond(ctx, req)
		if err == nil && res == nil {
			return nil, permanent{fmt.Errorf("the provider returned no result: return a Result with no Credentials to say there are none for this image")}
		}
		return res, err
	}
	cred, err := rc.RegistryCredential(ctx, req)
	if err != nil {
		return nil, err
	}
	if cred == nil || cred.Registry == "" {
		return nil, permanent{fmt.Errorf("the provider returned no credential (or one without a registry)")}
	}
	return &Result{Credentials: []cloud.RegistryCredential{*cred}}, nil
}

// permanent marks an answer that is wrong, not failed: asking again gives
// the same, so it is not retried.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }
