package registry

import (
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

	if err := os.WriteFile(path, []byte("not json\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Host: "h:1", Dir: dir, Secret: testSecret}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt journal: %v", err)
	}
}
