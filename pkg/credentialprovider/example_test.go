package credentialprovider_test

import (
	"context"
	"os"
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
