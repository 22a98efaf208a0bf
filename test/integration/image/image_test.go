// Package image tests pushing the portside image (internal/image) to the
// local cloud's registry and pulling it back. The binaries are small fakes:
// cross-compiling the real one takes minutes (`make image` does that).
package image

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/portside-io/portside/internal/image"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func buildFake(t *testing.T) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	bins := map[image.Platform]string{}
	for _, p := range image.Platforms {
		path := filepath.Join(dir, p.Architecture)
		if err := os.WriteFile(path, []byte("#fake portside "+p.String()+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[p] = path
	}
	idx, err := image.Build(context.Background(), image.Options{
		Version: "v0.0.0-test", Commit: "feedface", BuildDate: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Binaries: bins,
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func credential(t *testing.T, c *localcloudtest.Cloud, img string, push bool) authn.Authenticator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cred, err := c.Client.Credential(ctx, api.CredentialRequest{Image: img, Push: push})
	if err != nil {
		t.Fatal(err)
	}
	if cred.Push != push {
		t.Fatalf("credential push = %v, want %v", cred.Push, push)
	}
	return &authn.Basic{Username: cred.Username, Password: cred.Password}
}

func TestPushToLocalCloud(t *testing.T) {
	c := localcloudtest.Start(t)
	idx := buildFake(t)
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	img := c.RegistryHost + "/" + image.DefaultRepository + ":test"
	ref, err := name.ParseReference(img) // loopback: plain HTTP
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("anonymous push refused", func(t *testing.T) {
		err := image.Push(ctx, idx, ref, authn.Anonymous)
		assertStatus(t, err, http.StatusUnauthorized)
	})
	t.Run("pull credential may not push", func(t *testing.T) {
		err := image.Push(ctx, idx, ref, credential(t, c, img, false))
		assertStatus(t, err, http.StatusForbidden)
	})

	if err := image.Push(ctx, idx, ref, credential(t, c, img, true)); err != nil {
		t.Fatal(err)
	}

	pull := remote.WithAuth(credential(t, c, img, false))
	got, err := remote.Index(ref, pull, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := got.Digest(); err != nil || d != want {
		t.Fatalf("pulled index digest %v (%v), pushed %s", d, err, want)
	}
	// Each platform's image, config and layer came along.
	m, err := got.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("pulled index has %d manifests, want 2", len(m.Manifests))
	}
	for _, d := range m.Manifests {
		pi, err := got.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := pi.ConfigFile()
		if err != nil {
			t.Fatalf("%s: config: %v", d.Platform, err)
		}
		if cf.Config.User != image.User || cf.Config.Labels["org.opencontainers.image.version"] != "v0.0.0-test" || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: pulled config user %q, labels %v, arch %s", d.Platform, cf.Config.User, cf.Config.Labels, cf.Architecture)
		}
		ls, err := pi.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("%s: layers %d, %v", d.Platform, len(ls), err)
		}
		rc, err := ls[0].Compressed()
		if err != nil {
			t.Fatalf("%s: layer: %v", d.Platform, err)
		}
		rc.Close()
	}
	// The same platform image resolves through the index by platform, as a
	// node of that architecture pulls it.
	arm, err := remote.Image(ref, pull, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	if err != nil {
		t.Fatal(err)
	}
	if cf, err := arm.ConfigFile(); err != nil || cf.Architecture != "arm64" {
		t.Errorf("linux/arm64 image: config %v, %v", cf, err)
	}

	// Anonymous pulls are refused too.
	if _, err := remote.Index(ref, remote.WithContext(ctx)); err == nil {
		t.Error("anonymous pull: no error")
	}
}

func assertStatus(t *testing.T, err error, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("push succeeded, want HTTP %d", status)
	}
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != status {
		t.Fatalf("push error %v, want HTTP %d", err, status)
	}
}
