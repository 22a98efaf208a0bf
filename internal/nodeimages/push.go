package nodeimages

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// Pushed is where an image went.
type Pushed struct {
	// Name is the upstream name pods use, e.g. PauseImage.
	Name string
	// Ref is the pushed reference by digest, "<host>/<repo>@sha256:…".
	Ref string
	// Repository and Tag are what a mirror is asked for (GET
	// /v2/<Repository>/manifests/<Tag>).
	Repository, Tag string
	Digest          v1.Hash
}

// MirrorRef is where an image goes in a registry (host[:port]) that
// containerd uses as a mirror of the image's registry (hosts.toml
// `[host."http://<registryHost>"]` under certs.d/registry.k8s.io): the
// same repository path and tag without the upstream host, since containerd
// asks the mirror for /v2/<repository>/manifests/<tag> (adding only
// ?ns=registry.k8s.io). registry.k8s.io/pause:3.10.2 →
// <registryHost>/pause:3.10.2.
func MirrorRef(imageName, registryHost string) (name.Tag, error) {
	up, err := name.NewTag(imageName, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image name %q: %w", imageName, err)
	}
	// The local registry speaks plain HTTP (on loopback or the cloud's
	// network).
	t, err := name.NewTag(registryHost+"/"+up.RepositoryStr()+":"+up.TagStr(), name.StrictValidation, name.Insecure)
	if err != nil {
		return name.Tag{}, fmt.Errorf("registry host %q: %w", registryHost, err)
	}
	if rf := registry.CheckName(t.RepositoryStr()); rf != nil {
		return name.Tag{}, rf
	}
	return t, nil
}

// Push writes images to registryHost at their MirrorRef with auth (a push
// credential of the local cloud: Client.Credential with Push).
func Push(ctx context.Context, images []Image, registryHost string, auth authn.Authenticator) ([]Pushed, error) {
	var out []Pushed
	for _, img := range images {
		ref, err := MirrorRef(img.Name, registryHost)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(ref, img.Image, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithUserAgent("portside-nodeimages")); err != nil {
			return nil, fmt.Errorf("push %s as %s: %w", img.Name, ref, err)
		}
		d, err := img.Image.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, Pushed{
			Name: img.Name, Ref: ref.Context().Digest(d.String()).String(),
			Repository: ref.RepositoryStr(), Tag: ref.TagStr(), Digest: d,
		})
	}
	return out, nil
}

// PushServed pushes images to the registry the local cloud of c serves,
// with a push credential it issues (as `portside cloud registries` and
// `make image IMAGE_FLAGS=--local-cloud-data-dir=…` do).
func PushServed(ctx context.Context, c *client.Client, images []Image) ([]Pushed, error) {
	host, err := registry.ServedRegistry(ctx, c)
	if err != nil {
		return nil, err
	}
	// One credential covers the registry host, whatever the repository.
	cred, err := c.Credential(ctx, api.CredentialRequest{Image: host + "/pause", Push: true})
	if err != nil {
		return nil, fmt.Errorf("push credential for %s: %w", host, err)
	}
	return Push(ctx, images, host, &authn.Basic{Username: cred.Username, Password: cred.Password})
}
