package credentialprovider

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// renewMargin is how long before expiry the kubelet should ask again: a
// tenth of the lifetime, at most five minutes, so the pull that uses a
// cached credential still finds it valid.
func renewMargin(lifetime time.Duration) time.Duration {
	return min(lifetime/10, 5*time.Minute)
}

// CacheDuration is how long the kubelet may cache a credential that
// expires at expiresAt: nil (the configured defaultCacheDuration) when the
// expiry is unknown, else the remaining lifetime less the renewal margin,
// in whole seconds; zero (do not cache) for a credential about to expire.
func CacheDuration(expiresAt, now time.Time) (*metav1.Duration, error) {
	if expiresAt.IsZero() {
		return nil, nil
	}
	remaining := expiresAt.Sub(now)
	if remaining <= 0 {
		return nil, fmt.Errorf("the cloud returned a credential that expired at %s (now %s): check the clocks of this node and the cloud",
			expiresAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	d := (remaining - renewMargin(remaining)).Truncate(time.Second)
	return &metav1.Duration{Duration: max(d, 0)}, nil
}

// NewResponse builds the kubelet's response for one credential, the image
// unknown. A Registry-scoped credential whose Registry has a path prefix is
// cached per image (see NewResponseFor).
func NewResponse(cred *cloud.RegistryCredential, now time.Time) (*v1.CredentialProviderResponse, error) {
	if cred == nil || cred.Registry == "" {
		return nil, errors.New("the provider returned no credential (or one without a registry)")
	}
	return NewResponseFor("", &Result{Credentials: []cloud.RegistryCredential{*cred}}, now)
}

// NewResponseFor builds the kubelet's response to a request for image from
// a provider's Result; image may be "" when unknown. Errors name what of the
// Result is wrong.
//
//   - auth has one entry per credential, keyed by its Registry; none is
//     "success, no credentials" (cached like any answer).
//   - cacheKeyType is r.Scope, else the narrowest of the credentials'
//     scopes, else Registry, narrowed to Image when a Registry-keyed cache
//     entry would be found for images no credential matches.
//   - cacheDuration is r.CacheDuration when set (0: not cached), never
//     longer than the earliest-expiring credential allows; left out (the
//     kubelet's defaultCacheDuration) when neither says.
func NewResponseFor(image string, r *Result, now time.Time) (*v1.CredentialProviderResponse, error) {
	resp, _, err := buildResponse(image, r, now)
	return resp, err
}

// buildResponse is NewResponseFor, also saying why the cache key was
// narrowed ("" when it was not).
func buildResponse(image string, r *Result, now time.Time) (*v1.CredentialProviderResponse, string, error) {
	if r == nil {
		return nil, "", errors.New("the provider returned no result: return a Result with no Credentials to say there are none for this image")
	}
	auth := make(map[string]v1.AuthConfig, len(r.Credentials))
	keys := make([]authKey, 0, len(r.Credentials))
	var earliest time.Time
	narrowest := cloud.CredentialScope("")
	for i, c := range r.Credentials {
		k, err := parseAuthKey(c.Registry)
		if err != nil {
			return nil, "", fmt.Errorf("credential %d: %w", i+1, err)
		}
		if _, dup := auth[c.Registry]; dup {
			return nil, "", fmt.Errorf("two credentials for registry %q: the kubelet's auth map has one entry per registry", c.Registry)
		}
		s, err := checkScope(c.Scope)
		if err != nil {
			return nil, "", err
		}
		if narrowest == "" || scopeRank[s] < scopeRank[narrowest] {
			narrowest = s
		}
		if !c.ExpiresAt.IsZero() && (earliest.IsZero() || c.ExpiresAt.Before(earliest)) {
			earliest = c.ExpiresAt
		}
		auth[c.Registry] = v1.AuthConfig{Username: c.Username, Password: c.Password}
		keys = append(keys, k)
	}
	scope := narrowest
	if r.Scope != "" {
		var err error
		if scope, err = checkScope(r.Scope); err != nil {
			return nil, "", err
		}
	}
	keyType, narrowed := decideCacheKeyType(image, keys, scope)
	cacheFor, err := decideCacheDuration(r.CacheDuration, earliest, now)
	if err != nil {
		return nil, "", err
	}
	return &v1.CredentialProviderResponse{
		TypeMeta:      metav1.TypeMeta{APIVersion: APIVersion, Kind: "CredentialProviderResponse"},
		CacheKeyType:  keyType,
		CacheDuration: cacheFor,
		Auth:          auth,
	}, narrowed, nil
}

// decideCacheDuration combines what the provider said (explicit, may be
// nil) with the earliest credential expiry (zero: unknown): an explicit
// duration wins, but never outlasts a credential; nil leaves it to the
// kubelet's defaultCacheDuration.
func decideCacheDuration(explicit *time.Duration, earliest, now time.Time) (*metav1.Duration, error) {
	fromExpiry, err := CacheDuration(earliest, now)
	if err != nil {
		return nil, err
	}
	if explicit == nil {
		return fromExpiry, nil
	}
	if *explicit < 0 {
		return nil, fmt.Errorf("the provider asked for a negative cache duration (%s): use 0 not to cache, or leave CacheDuration nil for the kubelet's default", *explicit)
	}
	d := explicit.Truncate(time.Second)
	if fromExpiry != nil && fromExpiry.Duration < d {
		d = fromExpiry.Duration
	}
	return &metav1.Duration{Duration: d}, nil
}
