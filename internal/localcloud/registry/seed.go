package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// DefaultSeedImage is the name (repository:tag) SeedImage pushes by default.
const DefaultSeedImage = "portside/hello:1.0"

// seedEpoch makes the seed image reproducible: same bytes, same digest.
var seedEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// SeedImageContents builds the small linux/amd64 OCI image SeedImage pushes:
// one layer holding /hello.txt, a command, and org.opencontainers.image labels.
func SeedImageContents() (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hello := []byte("Hello from the Portside local cloud registry.\n")
	if err := tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(hello)), ModTime: seedEpoch, Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(hello); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: seedEpoch}
	cfg.Config.Cmd = []string{"/bin/cat", "/hello.txt"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "portside-hello",
		"org.opencontainers.image.description": "Seed image of the Portside local cloud registry",
		"org.opencontainers.image.vendor":      "Portside",
		"org.opencontainers.image.version":     "1.0",
		"org.opencontainers.image.created":     seedEpoch.Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cfg)
}

// SeedImage pushes the seed image (SeedImageContents) to host as
// name (repository[:tag], e.g. DefaultSeedImage) with cred, which must be a
// push credential, and returns the image's digest ("sha256:...").
func SeedImage(ctx context.Context, host, imageName string, cred authn.Authenticator) (string, error) {
	ref, err := name.ParseReference(host+"/"+imageName, name.Insecure) // the local registry speaks plain HTTP
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", imageName, err)
	}
	img, err := SeedImageContents()
	if err != nil {
		return "", fmt.Errorf("build seed image: %w", err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(cred), remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// ServedRegistry returns the host:port of the registry the cloud serves.
func ServedRegistry(ctx context.Context, c *client.Client) (string, error) {
	regs, err := c.ListRegistries(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range regs {
		if r.Served {
			return r.Host, nil
		}
	}
	return "", fmt.Errorf("the local cloud at %s serves no registry (start it with --registry-listen)", c.Endpoint())
}

// SeedServed pushes the seed image as imageName (default DefaultSeedImage)
// to the cloud's served registry, with a push credential the cloud issues,
// and returns the pushed reference, "<host>/<imageName>@sha256:...".
func SeedServed(ctx context.Context, c *client.Client, imageName string) (string, error) {
	if imageName == "" {
		imageName = DefaultSeedImage
	}
	host, err := ServedRegistry(ctx, c)
	if err != nil {
		return "", err
	}
	cred, err := c.Credential(ctx, api.CredentialRequest{Image: host + "/" + imageName, Push: true})
	if err != nil {
		return "", fmt.Errorf("push credential for %s: %w", host, err)
	}
	digest, err := SeedImage(ctx, host, imageName, &authn.Basic{Username: cred.Username, Password: cred.Password})
	if err != nil {
		return "", err
	}
	return host + "/" + imageName + "@" + digest, nil
}
