package registry

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestNarrowedCredentialOnRegistry: a credential narrowed to team-a/ pulls
// team-a's images and the public ones (the kubelet sends it for every
// image of the registry, and what anyone may pull it may too), and is
// refused team-b's, the catalog and any push.
func TestNarrowedCredentialOnRegistry(t *testing.T) {
	hs := httptest.NewUnstartedServer(nil)
	host := hs.Listener.Addr().String()
	dir := t.TempDir()
	reg, err := New(Options{Host: host, Dir: dir, Secret: testSecret, PublicPrefixes: []string{"registry.k8s.io/"}})
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = reg.Handler()
	hs.Start()
	closed := false
	t.Cleanup(func() {
		if !closed {
			hs.Close()
			_ = reg.Close()
		}
	})

	node := cred(host, NodeSubject, true, time.Hour)
	images := map[string]v1.Image{}
	for _, r := range []string{"team-a/app:1", "team-b/app:1", "registry.k8s.io/pause:3.10"} {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		images[r] = img
		if err := remote.Write(ref(t, host, r), img, remote.WithAuth(node)); err != nil {
			t.Fatalf("push %s: %v", r, err)
		}
	}
	img := images["team-a/app:1"]
	u, p := Sign(testSecret, Claims{Host: host, Subject: "system:serviceaccount:team-a:puller", ExpiresAt: time.Now().Add(time.Hour),
		Repositories: []string{"team-a/"}})
	narrowed := &authn.Basic{Username: u, Password: p}
	for _, r := range []string{"team-a/app:1", "registry.k8s.io/pause:3.10"} {
		if _, err := remote.Image(ref(t, host, r), remote.WithAuth(narrowed)); err != nil {
			t.Errorf("pull %s with a credential narrowed to team-a/: %v", r, err)
		}
	}
	if _, err := remote.Image(ref(t, host, "team-b/app:1"), remote.WithAuth(narrowed)); status(err) != http.StatusForbidden {
		t.Errorf("pull team-b/app:1 with a credential narrowed to team-a/: %v; want 403", err)
	}
	if err := remote.Write(ref(t, host, "team-a/app:2"), img, remote.WithAuth(narrowed)); status(err) != http.StatusForbidden {
		t.Errorf("push with a narrowed credential: %v; want 403", err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v2/_catalog", nil)
	req.SetBasicAuth(u, p)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("catalog with a narrowed credential: %s; want 403", resp.Status)
	}

	// Blobs are stored for all repositories at once: another repository's
	// layer and config, fetched by digest through an allowed repository's
	// path, are unknown there, to a narrowed credential and to an
	// anonymous pull of a public repository alike; a node's credential
	// reads them.
	for _, tc := range []struct {
		path string
		user string // "" anonymous
		want int
	}{
		{"/v2/team-a/app/blobs/" + blobDigests(t, images["team-b/app:1"])[0], u, http.StatusNotFound},
		{"/v2/team-a/app/blobs/" + blobDigests(t, images["team-b/app:1"])[1], u, http.StatusNotFound},
		{"/v2/team-a/app/blobs/" + blobDigests(t, images["team-a/app:1"])[1], u, http.StatusOK},
		{"/v2/registry.k8s.io/pause/blobs/" + blobDigests(t, images["team-b/app:1"])[1], "", http.StatusNotFound},
		{"/v2/registry.k8s.io/pause/blobs/" + blobDigests(t, images["registry.k8s.io/pause:3.10"])[1], "", http.StatusOK},
		{"/v2/team-a/app/blobs/" + blobDigests(t, images["team-b/app:1"])[1], "node", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+tc.path, nil)
		switch tc.user {
		case u:
			req.SetBasicAuth(u, p)
		case "node":
			nu, np := Sign(testSecret, Claims{Host: host, Subject: NodeSubject, ExpiresAt: time.Now().Add(time.Hour)})
			req.SetBasicAuth(nu, np)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s as %q: %s; want %d", tc.path, tc.user, resp.Status, tc.want)
		}
	}

	// Restarted, the registry knows again which blobs are whose (the
	// journal's replay): public and narrowed pulls still work.
	hs.Close()
	_ = reg.Close()
	closed = true
	reg2, err := New(Options{Host: host, Dir: dir, Secret: testSecret, PublicPrefixes: []string{"registry.k8s.io/"}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg2.Close()
	hs2 := httptest.NewServer(reg2.Handler())
	defer hs2.Close()
	req, _ = http.NewRequest(http.MethodGet, hs2.URL+"/v2/registry.k8s.io/pause/blobs/"+blobDigests(t, images["registry.k8s.io/pause:3.10"])[1], nil)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("public blob after a restart: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
}

// blobDigests is img's config digest, then its layers'.
func blobDigests(t *testing.T, img v1.Image) []string {
	t.Helper()
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{cfg.String()}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

// TestBlobsIndexedBeforeManifestServed: a pull served a manifest the
// moment the registry stores it (a re-push of a public tag) finds its
// blobs; they are indexed before the store, not after the journal's fsync.
func TestBlobsIndexedBeforeManifestServed(t *testing.T) {
	host := "registry.test:5000"
	reg, err := New(Options{Host: host, Dir: t.TempDir(), Secret: testSecret, PublicPrefixes: []string{"pause"}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	layer := blobDigests(t, img)[1]
	// The blob itself, stored as a push would have.
	lyrs, _ := img.Layers()
	rc, err := lyrs[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	nu, np := Sign(testSecret, Claims{Host: host, Subject: NodeSubject, Push: true, ExpiresAt: time.Now().Add(time.Hour)})
	up := httptest.NewRequest(http.MethodPost, "http://"+host+"/v2/pause/blobs/uploads/?digest="+layer, rc)
	up.SetBasicAuth(nu, np)
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, up)
	if rec.Code != http.StatusCreated {
		t.Fatalf("blob upload: %d %s", rec.Code, rec.Body.String())
	}

	during := 0
	storeThenPull := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reg.inner.ServeHTTP(w, req) // stored: from here a pull gets the manifest
		pull := httptest.NewRecorder()
		reg.Handler().ServeHTTP(pull, httptest.NewRequest(http.MethodGet, "http://"+host+"/v2/pause/blobs/"+layer, nil))
		during = pull.Code
	})
	put := httptest.NewRequest(http.MethodPut, "http://"+host+"/v2/pause/manifests/1", bytes.NewReader(raw))
	put.Header.Set("Content-Type", string(mt))
	reg.journal.serveWrite(httptest.NewRecorder(), put, storeThenPull)
	if during != http.StatusOK {
		t.Errorf("anonymous pull of the layer of a manifest just stored: %d, want 200", during)
	}
}
