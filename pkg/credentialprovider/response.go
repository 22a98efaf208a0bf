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

// cacheKeyType maps a credential's scope to the kubelet's cache key type.
func cacheKeyType(s cloud.CredentialScope) (v1.PluginCacheKeyType, error) {
	switch s {
	case "", cloud.ScopeRegistry:
		return v1.RegistryPluginCacheKeyType, nil
	case cloud.ScopeImage:
		return v1.ImagePluginCacheKeyType, nil
	case cloud.ScopeGlobal:
		return v1.GlobalPluginCacheKeyType, nil
	}
	return "", fmt.Errorf("the provider returned a credential with unknown scope %q (want Registry, Image or Global)", s)
}

// NewResponse builds the kubelet's response for a credential.
func NewResponse(cred *cloud.RegistryCredential, now time.Time) (*v1.CredentialProviderResponse, error) {
	if cred == nil || cred.Registry == "" {
		return nil, errors.New("the provider returned no credential (or one without a registry)")
	}
	keyType, err := cacheKeyType(cred.Scope)
	if err != nil {
		return nil, err
	}
	cacheFor, err := CacheDuration(cred.ExpiresAt, now)
	if err != nil {
		return nil, err
	}
	return &v1.CredentialProviderResponse{
		TypeMeta:      metav1.TypeMeta{APIVersion: APIVersion, Kind: "CredentialProviderResponse"},
		CacheKeyType:  keyType,
		CacheDuration: cacheFor,
		Auth:          map[string]v1.AuthConfig{cred.Registry: {Username: cred.Username, Password: cred.Password}},
	}, nil
}
