package registry

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
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
	reg, err := New(Options{Host: host, Dir: t.TempDir(), Secret: testSecret, PublicPrefixes: []string{"registry.k8s.io/"}})
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = reg.Handler()
	hs.Start()
	t.Cleanup(func() { hs.Close(); _ = reg.Close() })

	node := cred(host, NodeSubject, true, time.Hour)
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"team-a/app:1", "team-b/app:1", "registry.k8s.io/pause:3.10"} {
		if err := remote.Write(ref(t, host, r), img, remote.WithAuth(node)); err != nil {
			t.Fatalf("push %s: %v", r, err)
		}
	}
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
}
