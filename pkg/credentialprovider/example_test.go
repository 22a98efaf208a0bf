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
