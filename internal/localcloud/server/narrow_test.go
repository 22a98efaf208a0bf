package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestExchangedCredentialNarrowed: an issuer trusted with repositories
// gives each service account's exchanged credential only those, the
// placeholders filled in with its namespace and name; it pulls them and
// is refused (403 DENIED, naming what it may read) any other repository
// and the catalog. An issuer trusted without repositories still gives
// credentials that read everything.
func TestExchangedCredentialNarrowed(t *testing.T) {
	c, host, _ := startWithRegistry(t, t.TempDir())
	ctx := context.Background()
	for _, img := range []string{"team-a/app:1", "team-b/app:1", "shared/base:1", "team-a-x/app:1", "builders/team-a/puller/tool:1"} {
		if _, err := registry.SeedServed(ctx, c, img); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := c.PutTokenIssuer(ctx, api.TokenIssuer{Issuer: "https://narrow.test", Audiences: []string{"portside-registry"},
		PublicKeysPEM: pemOf(t, &key.PublicKey), Repositories: []string{"{namespace}/", "shared/base", "builders/{namespace}/{serviceAccount}/"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutTokenIssuer(ctx, api.TokenIssuer{Issuer: "https://wide.test", Audiences: []string{"portside-registry"},
		PublicKeysPEM: pemOf(t, &key.PublicKey)}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token := func(iss string) string {
		return signToken(t, tokenSpec{key: key, alg: jose.RS256, iss: iss, sub: "system:serviceaccount:team-a:puller",
			aud: []string{"portside-registry"}, exp: now.Add(10 * time.Minute), nbf: now, ns: "team-a", sa: "puller"})
	}
	pull := func(cred *api.Credential, img string) error {
		r, err := name.ParseReference(host+"/"+img, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		_, err = remote.Get(r, remote.WithAuth(&authn.Basic{Username: cred.Username, Password: cred.Password}))
		return err
	}

	cred, err := c.Credential(ctx, api.CredentialRequest{Image: host + "/team-a/app:1", ServiceAccountToken: token("https://narrow.test")})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cred.Repositories, ","); got != "team-a/,shared/base,builders/team-a/puller/" {
		t.Fatalf("credential repositories = %q", got)
	}
	for _, img := range []string{"team-a/app:1", "shared/base:1", "builders/team-a/puller/tool:1"} {
		if err := pull(cred, img); err != nil {
			t.Errorf("pull %s with the narrowed credential: %v", img, err)
		}
	}
	for _, img := range []string{"team-b/app:1", "team-a-x/app:1"} {
		err := pull(cred, img)
		var te *transport.Error
		if err == nil || !errors.As(err, &te) || te.StatusCode != http.StatusForbidden || !strings.Contains(err.Error(), "reads only team-a/, shared/base") {
			t.Errorf("pull %s with a credential narrowed to team-a/: %v; want 403 naming what it reads", img, err)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v2/_catalog", nil)
	req.SetBasicAuth(cred.Username, cred.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the catalog with a narrowed credential: %s; want 403", resp.Status)
	}

	wide, err := c.Credential(ctx, api.CredentialRequest{Image: host + "/team-b/app:1", ServiceAccountToken: token("https://wide.test")})
	if err != nil || len(wide.Repositories) != 0 {
		t.Fatalf("credential from an issuer without repositories = %+v, %v", wide, err)
	}
	if err := pull(wide, "team-b/app:1"); err != nil {
		t.Errorf("pull with a credential not narrowed: %v", err)
	}
}

func TestRepositoryPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		ok      bool
	}{
		{"{namespace}/", true},
		{"{namespace}", true},
		{"shared/base", true},
		{"shared/", true},
		{"teams/{namespace}/{serviceAccount}/", true},
		{"{namespace}-images/", false}, // a placeholder must be a whole component
		{"x{serviceAccount}", false},
		{"{other}/", false},
		{"Team/", false},
		{"a//b", false},
		{"/", false},
		{"", false},
		{"a,b", false},
		// Names are unique only within a namespace: {serviceAccount}
		// without {namespace} before it would share across namespaces.
		{"{serviceAccount}/", false},
		{"builders/{serviceAccount}/", false},
		{"{serviceAccount}/{namespace}/", false},
		{"{namespace}/tools/{serviceAccount}", true},
	} {
		err := checkRepositoryPattern(tc.pattern)
		if (err == nil) != tc.ok {
			t.Errorf("checkRepositoryPattern(%q) = %v; want ok %v", tc.pattern, err, tc.ok)
		}
	}
	sa := &serviceAccount{Namespace: "team-a", Name: "puller.v2"}
	got := repositoriesFor([]string{"{namespace}/", "b/{namespace}/{serviceAccount}"}, sa)
	if strings.Join(got, ",") != "team-a/,b/team-a/puller.v2" {
		t.Errorf("repositoriesFor = %v", got)
	}
	if repositoriesFor(nil, sa) != nil {
		t.Error("no patterns must mean every repository (nil)")
	}
}
