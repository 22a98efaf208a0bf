package cloud

import (
	"context"
	"time"
)

// RegistryCredential is a short-lived credential for an image registry.
type RegistryCredential struct {
	// Registry is the host (and optional port and path prefix) the
	// credential is for, e.g. "registry.example.com:5000".
	Registry string
	Username string
	Password string
	// ExpiresAt is when the credential stops working; the kubelet caches it
	// until shortly before.
	ExpiresAt time.Time
}

// RegistryCredentials issues image registry credentials, for the kubelet
// image credential provider.
type RegistryCredentials interface {
	// RegistryCredential returns a credential for pulling image (a full
	// reference such as "registry.example.com/team/app:1.0"); an error
	// wrapping ErrNotFound when the cloud has no credential for its registry.
	RegistryCredential(ctx context.Context, image string) (*RegistryCredential, error)
}
