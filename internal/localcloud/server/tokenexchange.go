package server

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// tokenLeeway is the clock skew allowed for a token's nbf and iat.
const tokenLeeway = 60 * time.Second

// tokenAlgorithms are the signature algorithms accepted in service-account tokens.
var tokenAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.ES256, jose.ES384}

// parsePublicKeys reads the RSA and ECDSA public keys (PUBLIC KEY, RSA PUBLIC
// KEY or CERTIFICATE blocks) in data.
func parsePublicKeys(data string) ([]any, error) {
	var keys []any
	rest := []byte(data)
	for i := 1; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		var key any
		var err error
		switch block.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				key = cert.PublicKey
			}
		default:
			return nil, fmt.Errorf("PEM block %d is a %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", i, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %v", i, block.Type, err)
		}
		switch key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey:
			keys = append(keys, key)
		default:
			return nil, fmt.Errorf("PEM block %d: %T keys are not supported: want RSA or ECDSA", i, key)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("publicKeysPEM holds no PEM public key (want the public half of the apiserver's --service-account-signing-key-file)")
	}
	return keys, nil
}

func validateIssuer(iss *api.TokenIssuer) error {
	if iss.Issuer == "" {
		return invalid("issuer is empty: want the cluster's --service-account-issuer, e.g. https://kubernetes.default.svc")
	}
	if u, err := url.Parse(iss.Issuer); err != nil || u.Scheme == "" || u.Host == "" {
		return invalid("issuer %q is not a URL: want the cluster's --service-account-issuer, e.g. https://kubernetes.default.svc", iss.Issuer)
	}
	if len(iss.Audiences) == 0 || slices.Contains(iss.Audiences, "") {
		return invalid("audiences must list at least one non-empty audience (the kubelet's credential provider tokenAttributes.serviceAccountTokenAudience)")
	}
	for _, a := range iss.Audiences {
		if apiServerAudience(a, iss.Issuer) {
			return invalid("audience %q is the apiserver's own: every pod's token carries it, so any pod could exchange its token for registry credentials; give a dedicated audience, e.g. portside-local-registry, the kubelet's credential provider tokenAttributes.serviceAccountTokenAudience", a)
		}
	}
	if _, err := parsePublicKeys(iss.PublicKeysPEM); err != nil {
		return invalid("publicKeysPEM: %v", err)
	}
	for _, p := range iss.Repositories {
		if err := checkRepositoryPattern(p); err != nil {
			return invalid("repositories: %v", err)
		}
	}
	return nil
}

// Placeholders of a TokenIssuer's repositories, replaced by the token's
// service account at exchange time.
const (
	namespacePlaceholder      = "{namespace}"
	serviceAccountPlaceholder = "{serviceAccount}"
)

// checkRepositoryPattern refuses a repositories entry that could never
// name a repository: it must be a repository name, or one followed by
// "/" (a prefix), with placeholders only as whole path components (a
// namespace such as "a-b" must not splice into a neighbouring name).
func checkRepositoryPattern(p string) error {
	name := strings.TrimSuffix(p, "/")
	namespaced := false
	for _, comp := range strings.Split(name, "/") {
		if strings.Contains(comp, "{") && comp != namespacePlaceholder && comp != serviceAccountPlaceholder {
			return fmt.Errorf("%q: %s and %s must be whole path components (e.g. \"{namespace}/\" or \"teams/{namespace}/{serviceAccount}\")", p, namespacePlaceholder, serviceAccountPlaceholder)
		}
		namespaced = namespaced || comp == namespacePlaceholder
		// A service account's name is unique only in its namespace: without
		// the namespace before it, account "team-a" of namespace team-b
		// would read what {namespace}/ gives namespace team-a.
		if comp == serviceAccountPlaceholder && !namespaced {
			return fmt.Errorf("%q: %s must follow %s (names are unique only within a namespace), e.g. \"{namespace}/{serviceAccount}/\"", p, serviceAccountPlaceholder, namespacePlaceholder)
		}
	}
	probe := strings.NewReplacer(namespacePlaceholder, "ns", serviceAccountPlaceholder, "sa").Replace(name)
	if r := registry.CheckName(probe); r != nil {
		return fmt.Errorf("%q is not a repository name or a prefix ending in \"/\": %s", p, r.Message)
	}
	return nil
}

// repositoriesFor is iss's repositories for service account sa, the
// placeholders replaced. exchangeToken has checked that the namespace is
// a DNS label and the name a DNS subdomain, as Kubernetes makes them:
// both are valid repository components, and neither can hold a "/" or a
// "," that would widen a pattern or split it in the credential.
func repositoriesFor(patterns []string, sa *serviceAccount) []string {
	if len(patterns) == 0 {
		return nil
	}
	r := strings.NewReplacer(namespacePlaceholder, sa.Namespace, serviceAccountPlaceholder, sa.Name)
	out := make([]string, 0, len(patterns))
	for _, p := range patterns {
		out = append(out, r.Replace(p))
	}
	return out
}

func (s *Server) putTokenIssuer(w http.ResponseWriter, r *http.Request) {
	var iss api.TokenIssuer
	if err := decode(w, r, &iss); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := validateIssuer(&iss); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	iss.CreatedAt = time.Now().UTC()
	err := s.store.Update(func(tx *store.Tx) error { return tx.Put(store.TokenIssuers, iss.Issuer, iss) })
	respond(w, r, http.StatusOK, iss, err)
}

func (s *Server) listTokenIssuers(w http.ResponseWriter, r *http.Request) {
	var out []api.TokenIssuer
	err := s.store.View(func(tx *store.Tx) (err error) {
		out, err = store.List[api.TokenIssuer](tx, store.TokenIssuers)
		return err
	})
	if out == nil {
		out = []api.TokenIssuer{}
	}
	respond(w, r, http.StatusOK, out, err)
}

func (s *Server) deleteTokenIssuer(w http.ResponseWriter, r *http.Request) {
	issuer := r.URL.Query().Get("issuer")
	if issuer == "" {
		respond(w, r, 0, nil, invalid("query parameter issuer is empty: DELETE /v1/token-issuers?issuer=<url>"))
		return
	}
	err := s.store.Update(func(tx *store.Tx) error {
		if !tx.Exists(store.TokenIssuers, issuer) {
			return notFound("token issuer %q not found", issuer)
		}
		return tx.Delete(store.TokenIssuers, issuer)
	})
	respond(w, r, 0, nil, err)
}

// serviceAccount is who an exchanged token belongs to.
type serviceAccount struct {
	Namespace, Name, UID string
	Expiry               time.Time
	// Repositories are what the trusting issuer lets it read (nil: all).
	Repositories []string
}

// k8sClaims are the Kubernetes claims of a bound service-account token.
type k8sClaims struct {
	Kubernetes struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// exchangeToken verifies a service-account token against the trusted
// issuers. Errors are 401s that say why and never include the token.
func (s *Server) exchangeToken(token string, now time.Time) (*serviceAccount, error) {
	reject := func(format string, args ...any) error {
		return unauthorized("service account token rejected: "+format, args...)
	}
	tok, err := jwt.ParseSigned(token, tokenAlgorithms)
	if err != nil {
		return nil, reject("not a signed JWT with one of %v: %v", tokenAlgorithms, err)
	}
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, reject("claims are not JSON: %v", err)
	}
	iss, ok, err := func() (iss api.TokenIssuer, ok bool, err error) {
		err = s.store.View(func(tx *store.Tx) error {
			iss, ok, err = store.Get[api.TokenIssuer](tx, store.TokenIssuers, unverified.Issuer)
			return err
		})
		return iss, ok, err
	}()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, reject("issuer %q is not trusted: trust it with POST /v1/token-issuers or `portside cloud registries trust-issuer`", unverified.Issuer)
	}
	keys, err := parsePublicKeys(iss.PublicKeysPEM)
	if err != nil {
		return nil, fmt.Errorf("trusted issuer %q: %w", iss.Issuer, err)
	}
	var std jwt.Claims
	var k8s k8sClaims
	verified := false
	for _, key := range keys {
		if tok.Claims(key, &std, &k8s) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, reject("signature does not match any public key of issuer %q", iss.Issuer)
	}
	// An issuer trusted before the apiserver's own audiences were refused
	// (validateIssuer) may still list one: it is never accepted.
	if !slices.ContainsFunc(std.Audience, func(a string) bool { return slices.Contains(iss.Audiences, a) && !apiServerAudience(a, iss.Issuer) }) {
		if slices.ContainsFunc(std.Audience, func(a string) bool { return slices.Contains(iss.Audiences, a) }) {
			return nil, reject("audience %v is the apiserver's own, which every pod's token carries: trust issuer %q again with a dedicated audience (e.g. portside-local-registry)", []string(std.Audience), iss.Issuer)
		}
		return nil, reject("audience %v not accepted (want one of %v)", []string(std.Audience), iss.Audiences)
	}
	if std.Expiry == nil {
		return nil, reject("it has no exp claim")
	}
	if exp := std.Expiry.Time(); !now.Before(exp) {
		return nil, reject("it expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if std.NotBefore != nil && std.NotBefore.Time().After(now.Add(tokenLeeway)) {
		return nil, reject("it is not valid before %s", std.NotBefore.Time().UTC().Format(time.RFC3339))
	}
	if std.IssuedAt != nil && std.IssuedAt.Time().After(now.Add(tokenLeeway)) {
		return nil, reject("it was issued in the future (%s)", std.IssuedAt.Time().UTC().Format(time.RFC3339))
	}
	sa := &serviceAccount{Namespace: k8s.Kubernetes.Namespace, Name: k8s.Kubernetes.ServiceAccount.Name,
		UID: k8s.Kubernetes.ServiceAccount.UID, Expiry: std.Expiry.Time()}
	if sa.Namespace == "" || sa.Name == "" {
		// Older tokens carry only sub = system:serviceaccount:<ns>:<name>.
		parts := strings.Split(std.Subject, ":")
		if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
			return nil, reject("it names no service account (no kubernetes.io claims and sub %q is not system:serviceaccount:<namespace>:<name>)", std.Subject)
		}
		sa.Namespace, sa.Name = parts[2], parts[3]
	}
	if errs := validation.IsDNS1123Label(sa.Namespace); len(errs) > 0 {
		return nil, reject("namespace %q is not a Kubernetes namespace name: %s", sa.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(sa.Name); len(errs) > 0 {
		return nil, reject("service account name %q is not a Kubernetes name: %s", sa.Name, strings.Join(errs, "; "))
	}
	sa.Repositories = repositoriesFor(iss.Repositories, sa)
	return sa, nil
}

// apiServerAudience reports whether audience a is one kube-apiserver
// gives every pod's token by default: its --api-audiences default to the
// issuer, and in-cluster issuers are the kubernetes Service's names. A
// token with it proves only that it came from some pod of the cluster.
func apiServerAudience(a, issuer string) bool {
	if a == issuer || strings.TrimSuffix(a, "/") == strings.TrimSuffix(issuer, "/") {
		return true
	}
	host := a
	if u, err := url.Parse(a); err == nil && u.Host != "" {
		host = u.Hostname()
	}
	switch host {
	case "kubernetes", "kubernetes.default", "kubernetes.default.svc":
		return true
	}
	return strings.HasPrefix(host, "kubernetes.default.svc.")
}
