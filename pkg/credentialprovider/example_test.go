package credentialprovider_test

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/credentialprovider"
)

// acmeRegistry stands for a provider's registry-credentials capability; a
// real one asks its cloud's token service.
type acmeRegistry struct{}

func (acmeRegistry) RegistryCredential(_ context.Context, req cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	return &cloud.RegistryCredential{
		Registry: "registry.acme.example", Username: "oauth2", Password: "short-lived-token",
		ExpiresAt: time.Now().Add(time.Hour),
	}, nil
}

// A provider's whole plugin: build it as its own binary, put it in the
// kubelet's --image-credential-provider-bin-dir and name it in the
// CredentialProviderConfig.
func Example() {
	// func main() {
	os.Exit(credentialprovider.Main(func(ctx context.Context) (cloud.RegistryCredentials, error) {
		return acmeRegistry{}, nil
	}))
	// }
}

// A plugin that answers what upstream plugins can: several auth entries
// for the provider's registries, and success with no credentials (cached
// for the config's defaultCacheDuration) for any other image.
func ExampleResponderFunc() {
	// func main() {
	os.Exit(credentialprovider.Main(func(ctx context.Context) (cloud.RegistryCredentials, error) {
		return credentialprovider.ResponderFunc(func(ctx context.Context, req cloud.RegistryCredentialRequest) (*credentialprovider.Result, error) {
			if !strings.HasSuffix(strings.SplitN(req.Image, "/", 2)[0], ".acme.example") {
				return &credentialprovider.Result{}, nil
			}
			expires := time.Now().Add(time.Hour)
			return &credentialprovider.Result{Credentials: []cloud.RegistryCredential{
				{Registry: "*.acme.example", Username: "oauth2", Password: "short-lived-token", ExpiresAt: expires},
				{Registry: "acme.example", Username: "oauth2", Password: "short-lived-token", ExpiresAt: expires},
			}}, nil
		}), nil
	}))
	// }
}

// What the kubelet gets from a Responder, for three images: several auth
// entries for the provider's registries (cached for the Result's
// CacheDuration, never past the earliest ExpiresAt), success with no
// credentials for an image it does not serve, and an answer the kubelet
// must not cache.
func ExampleResult() {
	rc := credentialprovider.ResponderFunc(func(ctx context.Context, req cloud.RegistryCredentialRequest) (*credentialprovider.Result, error) {
		host := strings.SplitN(req.Image, "/", 2)[0]
		switch {
		case host == "scratch.acme.example":
			// A build cache whose tokens are single-use: ask every time.
			return &credentialprovider.Result{
				Credentials:   []cloud.RegistryCredential{{Registry: host, Username: "oauth2", Password: "one-use-token"}},
				CacheDuration: credentialprovider.CacheFor(0),
			}, nil
		case strings.HasSuffix(host, ".acme.example"):
			expires := time.Now().Add(time.Hour)
			return &credentialprovider.Result{
				Credentials: []cloud.RegistryCredential{
					{Registry: "*.acme.example", Username: "oauth2", Password: "short-lived-token", ExpiresAt: expires},
					{Registry: "acme.example", Username: "oauth2", Password: "short-lived-token", ExpiresAt: expires},
				},
				CacheDuration: credentialprovider.CacheFor(10 * time.Minute),
			}, nil
		default:
			// Not ours: pull without credentials, and let the kubelet cache that.
			return &credentialprovider.Result{}, nil
		}
	})
	for _, image := range []string{"eu.acme.example/team/app:v1", "docker.io/library/busybox", "scratch.acme.example/ci/cache"} {
		req, err := credentialprovider.DecodeRequest([]byte(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"` + image + `"}`))
		if err != nil {
			panic(err)
		}
		if err := credentialprovider.Answer(context.Background(), rc, req, os.Stdout); err != nil {
			panic(err)
		}
	}
	// Output:
	// {"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"10m0s","auth":{"*.acme.example":{"username":"oauth2","password":"short-lived-token"},"acme.example":{"username":"oauth2","password":"short-lived-token"}}}
	// {"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry"}
	// {"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"0s","auth":{"scratch.acme.example":{"username":"oauth2","password":"one-use-token"}}}
}
