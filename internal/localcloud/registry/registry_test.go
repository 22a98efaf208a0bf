package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var testSecret = []byte("registry test secret")

// serve runs a registry in dir on a loopback port until the test ends.
func serve(t *testing.T, dir string) string {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	host := hs.Listener.Addr().String()
	reg, err := New(Options{Host: host, Dir: dir, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = reg.Handler()
	hs.Start()
	t.Cleanup(func() { hs.Close(); _ = reg.Close() })
	return host
}

func cred(host, subject string, push bool, ttl time.Duration) authn.Authenticator {
	u, p := Sign(testSecret, Claims{Host: host, Subject: subject, Push: push, ExpiresAt: time.Now().Add(ttl)})
	return &authn.Basic{Username: u, Password: p}
}

func ref(t *testing.T, host, s string) name.Reference {
	r, err := name.ParseReference(host+"/"+s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// status returns the HTTP status of a ggcr transport error.
func status(err error) int {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return 0
}

func TestPushPullAndRefusals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	host := serve(t, dir)
	digest, err := SeedImage(ctx, host, DefaultSeedImage, cred(host, NodeSubject, true, time.Hour))
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("push: %q %v", digest, err)
	}
	pull := remote.WithAuth(cred(host, "system:serviceaccount:ns:sa", false, time.Hour))
	for _, r := range []string{DefaultSeedImage, "portside/hello@" + digest} {
		img, err := remote.Image(ref(t, host, r), pull)
		if err != nil {
			t.Fatalf("pull %s: %v", r, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil || cfg.Architecture != "amd64" || cfg.Config.Labels["org.opencontainers.image.title"] == "" {
			t.Fatalf("config of %s = %+v %v", r, cfg, err)
		}
		if layers, err := img.Layers(); err != nil || len(layers) != 1 {
			t.Fatalf("layers = %v %v", layers, err)
		}
	}

	u, p := Sign(testSecret, Claims{Host: host, Subject: NodeSubject, ExpiresAt: time.Now().Add(time.Hour)})
	refused := []struct {
		name string
		auth authn.Authenticator
		want int
	}{
		{"no credential", authn.Anonymous, http.StatusUnauthorized},
		{"forged password", &authn.Basic{Username: u, Password: p[:len(p)-2] + "AA"}, http.StatusUnauthorized},
		{"other host", cred("registry.example.com:5000", NodeSubject, true, time.Hour), http.StatusUnauthorized},
		{"expired", cred(host, NodeSubject, true, -time.Second), http.StatusUnauthorized},
		{"other secret", func() authn.Authenticator {
			u, p := Sign([]byte("not the cloud's"), Claims{Host: host, Subject: NodeSubject, ExpiresAt: time.Now().Add(time.Hour)})
			return &authn.Basic{Username: u, Password: p}
		}(), http.StatusUnauthorized},
	}
	for _, tc := range refused {
		if _, err := remote.Get(ref(t, host, DefaultSeedImage), remote.WithAuth(tc.auth)); status(err) != tc.want {
			t.Errorf("%s: pull error = %v, want status %d", tc.name, err, tc.want)
		}
	}
	if _, err := SeedImage(ctx, host, "portside/other:1", cred(host, NodeSubject, false, time.Hour)); status(err) != http.StatusForbidden {
		t.Errorf("pull credential pushing: %v, want 403", err)
	}

	// The refusal is a registry-style error with a Basic challenge and no secret.
	req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v2/", nil)
	req.SetBasicAuth(u, p+"x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Errors []struct{ Code, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Basic realm="portside local cloud registry"` ||
		len(body.Errors) != 1 || body.Errors[0].Code != "UNAUTHORIZED" || strings.Contains(body.Errors[0].Message, p) {
		t.Fatalf("401 = %d %q %+v", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}

	// A registry restarted on the same directory serves what was pushed;
	// deletes are durable too.
	host2 := serve(t, dir)
	pull2 := remote.WithAuth(cred(host2, NodeSubject, false, time.Hour))
	desc, err := remote.Get(ref(t, host2, DefaultSeedImage), pull2)
	if err != nil || desc.Digest.String() != digest {
		t.Fatalf("after restart: %v %v", desc, err)
	}
	if _, err := SeedImage(ctx, host2, "portside/gone:1", cred(host2, NodeSubject, true, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := remote.Delete(ref(t, host2, "portside/gone:1"), remote.WithAuth(cred(host2, NodeSubject, true, time.Hour))); err != nil {
		t.Fatal(err)
	}
	host3 := serve(t, dir)
	pull3 := remote.WithAuth(cred(host3, NodeSubject, false, time.Hour))
	if _, err := remote.Get(ref(t, host3, "portside/gone:1"), pull3); status(err) != http.StatusNotFound {
		t.Fatalf("deleted tag after restart: %v", err)
	}
	if _, err := remote.Image(ref(t, host3, "portside/hello@"+digest), pull3); err != nil {
		t.Fatalf("digest after two restarts: %v", err)
	}
}

func TestJournalTornLastLine(t *testing.T) {
	dir := t.TempDir()
	host := serve(t, dir)
	digest, err := SeedImage(context.Background(), host, DefaultSeedImage, cred(host, NodeSubject, true, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, journalFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"op":"put","repo":"x","ref":"1","bo`) // a crash mid-append
	_ = f.Close()
	host2 := serve(t, dir)
	if desc, err := remote.Get(ref(t, host2, DefaultSeedImage), remote.WithAuth(cred(host2, NodeSubject, false, time.Hour))); err != nil || desc.Digest.String() != digest {
		t.Fatalf("after a torn append: %v %v", desc, err)
	}
	if data, _ := os.ReadFile(path); strings.Contains(string(data), `"repo":"x"`) {
		t.Fatalf("torn entry not cut off: %s", data)
	}

}

// putManifest PUTs body as a manifest at rawPath (sent as given, escapes
// and all) and returns the answer's status and error code.
func putManifest(t *testing.T, host, rawPath string, auth authn.Authenticator, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+host+rawPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", string(types.OCIManifestSchema1))
	a, _ := auth.Authorization()
	req.SetBasicAuth(a.Username, a.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var e struct {
		Errors []struct{ Code, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if len(e.Errors) > 0 {
		return resp.StatusCode, e.Errors[0].Code
	}
	return resp.StatusCode, ""
}

// TestBadNamesAndBadJournalRecords: a push under a name outside the OCI
// grammar is refused and not journaled; a journal holding bad records (as
// written by a registry that accepted such names, or damaged) still opens,
// skipping them, and the other images are served.
func TestBadNamesAndBadJournalRecords(t *testing.T) {
	dir := t.TempDir()
	host := serve(t, dir)
	push := cred(host, NodeSubject, true, time.Hour)
	digest, err := SeedImage(context.Background(), host, DefaultSeedImage, push)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := SeedImageContents()
	manifest, _ := img.RawManifest()
	for _, tc := range []struct {
		path, code string
	}{
		{"/v2/evil%3Fx/manifests/1", "NAME_INVALID"},
		{"/v2/Evil/manifests/1", "NAME_INVALID"},
		{"/v2/a/../b/manifests/1", "NAME_INVALID"},
		{"/v2/portside/hello/manifests/.bad", "TAG_INVALID"},
		{"/v2/portside/hello/manifests/sha256:" + strings.Repeat("0", 64), "DIGEST_INVALID"},
	} {
		if code, ec := putManifest(t, host, tc.path, push, manifest); code != http.StatusBadRequest || ec != tc.code {
			t.Errorf("PUT %s = %d %s, want 400 %s", tc.path, code, ec, tc.code)
		}
	}
	if code, ec := putManifest(t, host, "/v2/portside/hello/manifests/"+digest, push, manifest); code != http.StatusCreated {
		t.Errorf("PUT by its own digest = %d %s, want 201", code, ec)
	}
	path := filepath.Join(dir, journalFile)
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "evil") {
		t.Fatalf("a refused push was journaled: %s", data)
	}

	// Plant bad records between good ones: what an older registry journaled
	// for evil%3Fx, garbage, an unknown op, and an index whose manifests the
	// registry does not hold (it refuses the replay).
	evil, _ := json.Marshal(journalEntry{Op: "put", Repo: "evil?x", Ref: "1", ContentType: string(types.OCIManifestSchema1), Body: manifest})
	index, _ := json.Marshal(journalEntry{Op: "put", Repo: "portside/idx", Ref: "1", ContentType: string(types.OCIImageIndex),
		Body: []byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":1,"digest":"sha256:` + strings.Repeat("1", 64) + `"}]}`)})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(string(evil) + "\nnot json\n" + `{"op":"chmod","repo":"a","ref":"1"}` + "\n" + string(index) + "\n")
	_ = f.Close()

	host2 := serve(t, dir)
	push2 := cred(host2, NodeSubject, true, time.Hour)
	if _, err := SeedImage(context.Background(), host2, "portside/after:1", push2); err != nil {
		t.Fatalf("push after a restart over bad records: %v", err)
	}
	host3 := serve(t, dir)
	pull3 := remote.WithAuth(cred(host3, NodeSubject, false, time.Hour))
	for _, r := range []string{DefaultSeedImage, "portside/hello@" + digest, "portside/after:1"} {
		if desc, err := remote.Get(ref(t, host3, r), pull3); err != nil || desc.Digest.String() != digest {
			t.Errorf("%s after restarts over bad records: %v %v", r, desc, err)
		}
	}
	if _, err := remote.Get(ref(t, host3, "portside/idx:1"), pull3); status(err) != http.StatusNotFound {
		t.Errorf("a refused journal entry is served: %v", err)
	}
}
