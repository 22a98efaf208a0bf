package nodeimages

import (
	"context"
	"debug/buildinfo"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/testskip"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// realImages builds the images from the binaries `make tools` built.
func realImages(t *testing.T) []Image {
	t.Helper()
	dir, err := tools.BinDir()
	if err != nil {
		testskip.Unavailable(t, "tools directory: %v", err)
	}
	for _, b := range []string{tools.Pause, tools.Agnhost} {
		if _, err := tools.Path(dir, b); err != nil {
			testskip.Unavailable(t, "%v", err)
		}
	}
	images, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return images
}

// TestPushServedPullByDigest: the real images go to a real local cloud's
// registry with the push credential it issues, at the paths a containerd
// mirror of registry.k8s.io asks for; pulled back by digest (and by tag,
// as the mirror resolves) with a node's pull-only credential, they are
// the images built.
func TestPushServedPullByDigest(t *testing.T) {
	images := realImages(t)
	cloud := localcloudtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	pushed, err := PushServed(ctx, cloud.Client, images)
	if err != nil {
		t.Fatal(err)
	}
	wantRepos := map[string]string{PauseImage: "pause", AgnhostImage: "e2e-test-images/agnhost", CoreDNSImage: "coredns/coredns",
		BusyBoxImage: "e2e-test-images/busybox", GlibcDNSTestingImage: "e2e-test-images/glibc-dns-testing",
		RegressionIssue74839Image: "e2e-test-images/regression-issue-74839"}
	pull, err := cloud.Client.Credential(ctx, api.CredentialRequest{Image: cloud.RegistryHost + "/pause"})
	if err != nil {
		t.Fatal(err)
	}
	auth := &authn.Basic{Username: pull.Username, Password: pull.Password}
	for i, p := range pushed {
		want, _ := images[i].Image.Digest()
		if p.Name != images[i].Name || p.Repository != wantRepos[p.Name] || p.Digest != want {
			t.Errorf("pushed %+v; want %s in repository %s at %s", p, images[i].Name, wantRepos[p.Name], want)
		}
		t.Logf("%s → %s", p.Name, p.Ref)
		byDigest, err := name.NewDigest(p.Ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		byTag, err := name.NewTag(cloud.RegistryHost+"/"+p.Repository+":"+p.Tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range []name.Reference{byDigest, byTag} {
			img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuth(auth))
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			got, err := img.Digest()
			if err != nil || got != want {
				t.Errorf("pull %s: digest %s, %v; want %s", ref, got, err, want)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			wantCf, _ := images[i].Image.ConfigFile()
			if !reflect.DeepEqual(cf.Config.Entrypoint, wantCf.Config.Entrypoint) || !reflect.DeepEqual(cf.Config.Cmd, wantCf.Config.Cmd) || cf.Architecture != wantCf.Architecture {
				t.Errorf("pull %s: config %+v", ref, cf.Config)
			}
		}
	}

	// An anonymous pull is refused: the registry serves only credentials
	// the cloud signed (a node's containerd gets one from hosts.toml or
	// the credential provider).
	anon, _ := name.NewTag(cloud.RegistryHost+"/pause:3.10.2", name.Insecure)
	if _, err := remote.Image(anon, remote.WithContext(ctx)); err == nil {
		t.Error("anonymous pull of pause succeeded")
	}
}

// TestWriteArchiveReal: the real images as the archive `ctr images import`
// reads, for nodes without the registry.
func TestWriteArchiveReal(t *testing.T) {
	images := realImages(t)
	if err := WriteArchive(filepath.Join(t.TempDir(), "images.tar"), images); err != nil {
		t.Fatal(err)
	}
}

// TestPauseBinaryHasNoVCSStamp: make tools builds pause without the git
// revision Go stamps by default inside a checkout, so its image digest
// follows the source, not every commit of the checkout.
func TestPauseBinaryHasNoVCSStamp(t *testing.T) {
	dir, err := tools.BinDir()
	if err != nil {
		testskip.Unavailable(t, "tools directory: %v", err)
	}
	pause, err := tools.Path(dir, tools.Pause)
	if err != nil {
		testskip.Unavailable(t, "%v", err)
	}
	info, err := buildinfo.ReadFile(pause)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if strings.HasPrefix(s.Key, "vcs") {
			t.Errorf("pause carries build setting %s=%s: build it with -buildvcs=false", s.Key, s.Value)
		}
	}
}
