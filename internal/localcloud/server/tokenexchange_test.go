package server

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// startWithRegistry starts a server in dir that also serves its registry,
// until stop is called or the test ends.
func startWithRegistry(t *testing.T, dir string) (c *client.Client, host string, stop func()) {
	t.Helper()
	srv, err := New(context.Background(), filepath.Join(dir, StateFile), testPools())
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewUnstartedServer(nil)
	host = rs.Listener.Addr().String()
	if rs.Config.Handler, err = srv.ServeRegistry(host); err != nil {
		t.Fatal(err)
	}
	rs.Start()
	hs := httptest.NewServer(srv.Handler())
	var once sync.Once
	stop = func() { once.Do(func() { hs.Close(); rs.Close(); srv.Close() }) }
	t.Cleanup(stop)
	return client.New(hs.URL, testToken), host, stop
}

func pemOf(t *testing.T, pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func wantStatus(t *testing.T, what string, err error, status int, msg string) {
	t.Helper()
	se, ok := err.(*client.StatusError)
	if !ok || se.Status != status || !strings.Contains(se.Message, msg) {
		t.Fatalf("%s: got %v, want %d saying %q", what, err, status, msg)
	}
}

func TestTokenIssuers(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	good := api.TokenIssuer{Issuer: "https://cluster.test", Audiences: []string{"portside"}, PublicKeysPEM: pemOf(t, &rsaKey.PublicKey)}
	bad := []struct {
		name string
		edit func(*api.TokenIssuer)
		want string
	}{
		{"empty issuer", func(i *api.TokenIssuer) { i.Issuer = "" }, "issuer is empty"},
		{"issuer not a URL", func(i *api.TokenIssuer) { i.Issuer = "kubernetes" }, `issuer "kubernetes" is not a URL`},
		{"no audience", func(i *api.TokenIssuer) { i.Audiences = nil }, "at least one non-empty audience"},
		{"empty audience", func(i *api.TokenIssuer) { i.Audiences = []string{""} }, "at least one non-empty audience"},
		{"the issuer as audience (the apiserver's default)", func(i *api.TokenIssuer) { i.Audiences = []string{"portside", "https://cluster.test"} },
			`audience "https://cluster.test" is the apiserver's own`},
		{"the kubernetes Service as audience", func(i *api.TokenIssuer) { i.Audiences = []string{"https://kubernetes.default.svc.cluster.local"} },
			"give a dedicated audience"},
		{"no PEM", func(i *api.TokenIssuer) { i.PublicKeysPEM = "hello" }, "holds no PEM public key"},
		{"private key", func(i *api.TokenIssuer) {
			i.PublicKeysPEM = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}))
		}, `PEM block 1 is a "RSA PRIVATE KEY"`},
		{"garbage key", func(i *api.TokenIssuer) {
			i.PublicKeysPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("junk")}))
		}, "PEM block 1 (PUBLIC KEY)"},
		{"ed25519 key", func(i *api.TokenIssuer) { i.PublicKeysPEM = pemOf(t, edPub) }, "ed25519.PublicKey keys are not supported"},
	}
	for _, tc := range bad {
		iss := good
		tc.edit(&iss)
		_, err := c.PutTokenIssuer(ctx, iss)
		wantStatus(t, tc.name, err, 400, tc.want)
	}
	if _, err := c.PutTokenIssuer(ctx, good); err != nil {
		t.Fatal(err)
	}
	good.Audiences = []string{"a", "b"}
	if _, err := c.PutTokenIssuer(ctx, good); err != nil {
		t.Fatal(err)
	}
	if list, err := c.ListTokenIssuers(ctx); err != nil || len(list) != 1 || len(list[0].Audiences) != 2 {
		t.Fatalf("issuers = %+v %v", list, err)
	}
	if err := c.DeleteTokenIssuer(ctx, good.Issuer); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "delete again", c.DeleteTokenIssuer(ctx, good.Issuer), 404, "not found")
	wantStatus(t, "delete without issuer", c.DeleteTokenIssuer(ctx, ""), 400, "issuer is empty")
}

type tokenSpec struct {
	key      any
	alg      jose.SignatureAlgorithm
	iss, sub string
	aud      []string
	exp, nbf time.Time
	// iat is nbf when zero; noExp leaves exp out.
	iat    time.Time
	noExp  bool
	ns, sa string
}

func signToken(t *testing.T, s tokenSpec) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: s.key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	iat := s.iat
	if iat.IsZero() {
		iat = s.nbf
	}
	std := jwt.Claims{Issuer: s.iss, Subject: s.sub, Audience: s.aud, Expiry: jwt.NewNumericDate(s.exp),
		NotBefore: jwt.NewNumericDate(s.nbf), IssuedAt: jwt.NewNumericDate(iat)}
	if s.noExp {
		std.Expiry = nil
	}
	b := jwt.Signed(signer).Claims(std)
	if s.ns != "" {
		b = b.Claims(map[string]any{"kubernetes.io": map[string]any{"namespace": s.ns,
			"serviceaccount": map[string]string{"name": s.sa, "uid": "0b4c-uid"}}})
	}
	tok, err := b.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestServiceAccountTokenExchange(t *testing.T) {
	c, host, _ := startWithRegistry(t, t.TempDir())
	ctx := context.Background()
	image := host + "/" + registry.DefaultSeedImage
	if _, err := registry.SeedServed(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := c.PutTokenIssuer(ctx, api.TokenIssuer{Issuer: "https://cluster.test", Audiences: []string{"portside-registry"},
		PublicKeysPEM: pemOf(t, &ecKey.PublicKey) + pemOf(t, &rsaKey.PublicKey)}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	base := tokenSpec{key: rsaKey, alg: jose.RS256, iss: "https://cluster.test", sub: "system:serviceaccount:team-a:puller",
		aud: []string{"portside-registry"}, exp: now.Add(10 * time.Minute), nbf: now, ns: "team-a", sa: "puller"}
	with := func(edit func(*tokenSpec)) string { s := base; edit(&s); return signToken(t, s) }

	good := []struct{ name, token, subject string }{
		{"RS256", signToken(t, base), "system:serviceaccount:team-a:puller"},
		{"ES256, second key", with(func(s *tokenSpec) { s.key, s.alg = ecKey, jose.ES256 }), "system:serviceaccount:team-a:puller"},
		{"sub only", with(func(s *tokenSpec) { s.ns, s.sub = "", "system:serviceaccount:team-b:builder" }), "system:serviceaccount:team-b:builder"},
		// Clocks differ by seconds: a token valid from 30 s ahead is taken.
		{"nbf and iat within the leeway", with(func(s *tokenSpec) { s.nbf = now.Add(30 * time.Second) }), "system:serviceaccount:team-a:puller"},
	}
	for _, tc := range good {
		cred, err := c.Credential(ctx, api.CredentialRequest{Image: image, ServiceAccountToken: tc.token})
		if err != nil || cred.Subject != tc.subject || cred.Push || cred.ExpiresAt.After(base.exp) || strings.Contains(cred.Username, ":") {
			t.Fatalf("%s: credential = %+v %v", tc.name, cred, err)
		}
		r, _ := name.ParseReference(image, name.Insecure)
		if _, err := remote.Get(r, remote.WithAuth(&authn.Basic{Username: cred.Username, Password: cred.Password})); err != nil {
			t.Fatalf("%s: pull with the exchanged credential: %v", tc.name, err)
		}
	}

	bad := []struct {
		name, token string
		push        bool
		status      int
		want        string
	}{
		{"push", signToken(t, base), true, 403, "service account team-a/puller may not push"},
		{"wrong audience", with(func(s *tokenSpec) { s.aud = []string{"kube-apiserver"} }), false, 401,
			"service account token rejected: audience [kube-apiserver] not accepted (want one of [portside-registry])"},
		{"unknown issuer", with(func(s *tokenSpec) { s.iss = "https://other.test" }), false, 401,
			`issuer "https://other.test" is not trusted: trust it with POST /v1/token-issuers or ` + "`portside cloud registries trust-issuer`"},
		{"expired", with(func(s *tokenSpec) { s.exp, s.nbf = now.Add(-time.Minute), now.Add(-time.Hour) }), false, 401, "it expired at"},
		{"bad signature", with(func(s *tokenSpec) { s.key = otherKey }), false, 401, `signature does not match any public key of issuer "https://cluster.test"`},
		{"not yet valid", with(func(s *tokenSpec) { s.nbf = now.Add(5 * time.Minute) }), false, 401, "it is not valid before"},
		{"issued in the future", with(func(s *tokenSpec) { s.iat = now.Add(48 * time.Hour) }), false, 401, "it was issued in the future"},
		{"no exp", with(func(s *tokenSpec) { s.noExp = true }), false, 401, "it has no exp claim"},
		{"no service account", with(func(s *tokenSpec) { s.ns, s.sub = "", "alice" }), false, 401, "it names no service account"},
		// Namespaces and names fill repository patterns: a "/" or "," in
		// one could widen a credential; Kubernetes never makes them.
		{"namespace not a Kubernetes name (sub)", with(func(s *tokenSpec) { s.ns, s.sub = "", "system:serviceaccount:a/b:x" }), false, 401, `namespace "a/b" is not a Kubernetes namespace name`},
		{"namespace not a Kubernetes name", with(func(s *tokenSpec) { s.ns = "a,b" }), false, 401, `namespace "a,b" is not a Kubernetes namespace name`},
		{"name not a Kubernetes name", with(func(s *tokenSpec) { s.sa = "Puller/x" }), false, 401, `service account name "Puller/x" is not a Kubernetes name`},
		{"not a JWT", "not.a.jwt", false, 401, "service account token rejected: not a signed JWT"},
		{"HS256", with(func(s *tokenSpec) { s.key, s.alg = []byte("0123456789abcdef0123456789abcdef"), jose.HS256 }), false, 401, "not a signed JWT"},
	}
	for _, tc := range bad {
		_, err := c.Credential(ctx, api.CredentialRequest{Image: image, ServiceAccountToken: tc.token, Push: tc.push})
		wantStatus(t, tc.name, err, tc.status, tc.want)
		if strings.Contains(err.Error(), tc.token) || strings.Contains(err.Error(), strings.Split(tc.token, ".")[len(strings.Split(tc.token, "."))-1]) {
			t.Fatalf("%s: error includes the token: %v", tc.name, err)
		}
	}
}

func TestServedRegistry(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c, host, stop := startWithRegistry(t, dir)
	ref, err := registry.SeedServed(ctx, c, "team/app:2")
	if err != nil || !strings.HasPrefix(ref, host+"/team/app:2@sha256:") {
		t.Fatalf("seed: %q %v", ref, err)
	}
	if _, err := c.CreateRegistry(ctx, "registry.example.com"); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodDelete, c.Endpoint()+"/v1/registries/"+host, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("deleting the served registry: %s", resp.Status)
	}
	cred, err := c.Credential(ctx, api.CredentialRequest{Image: host + "/team/app:2"})
	if err != nil || cred.Subject != "node" || cred.Push || cred.Username != "portside" {
		t.Fatalf("node credential = %+v %v", cred, err)
	}
	// Restarted on another port, the cloud serves the same images there and
	// forgets the old host.
	stop()
	c2, host2, _ := startWithRegistry(t, dir)
	regs, err := c2.ListRegistries(ctx)
	if err != nil || len(regs) != 2 {
		t.Fatalf("registries = %+v %v", regs, err)
	}
	for _, r := range regs {
		if r.Served != (r.Host == host2) {
			t.Fatalf("registries = %+v (want only %s served)", regs, host2)
		}
	}
	cred, err = c2.Credential(ctx, api.CredentialRequest{Image: host2 + "/team/app:2"})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(host2+"/team/app:2", name.Insecure)
	if desc, err := remote.Get(r, remote.WithAuth(&authn.Basic{Username: cred.Username, Password: cred.Password})); err != nil || !strings.HasSuffix(ref, desc.Digest.String()) {
		t.Fatalf("after restart: %v %v", desc, err)
	}
}

func TestAPIServerAudience(t *testing.T) {
	const issuer = "https://kubernetes.default.svc.cluster.local"
	for _, tc := range []struct {
		a    string
		want bool
	}{
		{issuer, true},
		{issuer + "/", true},
		{"https://kubernetes.default.svc", true},
		{"kubernetes.default.svc", true},
		{"https://kubernetes.default.svc.example.internal", true},
		{"kubernetes", true},
		{"portside-local-registry", false},
		{"https://registry.example.com", false},
		{"kubernetes-registry", false},
	} {
		if got := apiServerAudience(tc.a, issuer); got != tc.want {
			t.Errorf("apiServerAudience(%q) = %v, want %v", tc.a, got, tc.want)
		}
	}
	if !apiServerAudience("https://oidc.example.com/cluster-1", "https://oidc.example.com/cluster-1") {
		t.Error("an external issuer used as audience is the apiserver's default too")
	}
}

// TestStoredAPIServerAudienceRefused: an issuer trusted before such
// audiences were refused (stored with the issuer URL as its audience)
// still exchanges no token carrying that audience, and the refusal says
// what to do.
func TestStoredAPIServerAudienceRefused(t *testing.T) {
	dir := t.TempDir()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	const issuer = "https://kubernetes.default.svc.cluster.local"
	srv, err := New(context.Background(), filepath.Join(dir, StateFile), testPools())
	if err != nil {
		t.Fatal(err)
	}
	old := api.TokenIssuer{Issuer: issuer, Audiences: []string{issuer, "portside-local-registry"}, PublicKeysPEM: pemOf(t, &rsaKey.PublicKey)}
	if err := srv.store.Update(func(tx *store.Tx) error { return tx.Put(store.TokenIssuers, issuer, old) }); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	c, host, _ := startWithRegistry(t, dir)
	ctx := context.Background()
	if _, err := registry.SeedServed(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec := tokenSpec{key: rsaKey, alg: jose.RS256, iss: issuer, sub: "system:serviceaccount:team-a:puller",
		aud: []string{issuer}, exp: now.Add(10 * time.Minute), nbf: now, ns: "team-a", sa: "puller"}
	image := host + "/" + registry.DefaultSeedImage
	_, err = c.Credential(ctx, api.CredentialRequest{Image: image, ServiceAccountToken: signToken(t, spec)})
	wantStatus(t, "a pod's ordinary token", err, 401, "is the apiserver's own, which every pod's token carries: trust issuer")
	spec.aud = []string{"portside-local-registry"}
	if _, err := c.Credential(ctx, api.CredentialRequest{Image: image, ServiceAccountToken: signToken(t, spec)}); err != nil {
		t.Fatalf("the dedicated audience: %v", err)
	}
}
