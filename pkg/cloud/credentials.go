package cloud

import (
	"context"
	"time"
)

// RegistryCredentialRequest is what the kubelet asks a credential provider
// for: credentials to pull one image.
type RegistryCredentialRequest struct {
	// Image is the full reference the kubelet is about to pull, e.g.
	// "registry.example.com/team/app:1.0".
	Image string
	// ServiceAccountToken is set in service-account-token mode (the kubelet's
	// tokenAttributes): a token of the pulling pod's service account, bound to
	// the pod and with the configured audience. A provider may exchange it for
	// credentials scoped to that workload. Never log it.
	ServiceAccountToken string
	// ServiceAccountAnnotations are the service account's annotations the
	// kubelet was configured to pass (required and optional keys).
	ServiceAccountAnnotations map[string]string
}

// CredentialScope says which images a credential is good for, which decides
// how the kubelet caches it (the response's cacheKeyType).
type CredentialScope string

const (
	// ScopeRegistry: every image of RegistryCredential.Registry (the default).
	ScopeRegistry CredentialScope = "Registry"
	// ScopeImage: only the requested image.
	ScopeImage CredentialScope = "Image"
	// ScopeGlobal: every image the plugin's matchImages select.
	ScopeGlobal CredentialScope = "Global"
)

// RegistryCredential is a short-lived credential for an image registry.
type RegistryCredential struct {
	// Registry is the host (and optional port and path prefix) the
	// credential is for, e.g. "registry.example.com:5000"; it becomes the
	// key of the kubelet's auth map, matched like matchImages.
	Registry string
	Username string
	Password string
	// ExpiresAt is when the credential stops working; the kubelet caches it
	// until shortly before. Zero means unknown: the kubelet's configured
	// defaultCacheDuration applies.
	ExpiresAt time.Time
	// Scope defaults to ScopeRegistry.
	Scope CredentialScope
}

// RegistryCredentials issues image registry credentials, for the kubelet
// image credential provider (`portside credential-provider`, or a
// provider's own plugin built with pkg/credentialprovider).
type RegistryCredentials interface {
	// RegistryCredential returns a credential for pulling req.Image; an error
	// wrapping ErrNotFound when the cloud serves no registry for the image.
	// Errors must not contain the token or any secret.
	RegistryCredential(ctx context.Context, req RegistryCredentialRequest) (*RegistryCredential, error)
}
