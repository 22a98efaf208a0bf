package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"sigs.k8s.io/yaml"
)

// pluginTimeout is how long the kubelet lets a credential provider run.
const pluginTimeout = time.Minute

func credentialsTest() Test {
	return Test{
		Name:    "credentials/round-trip",
		Needs:   []Capability{RegistryCreds},
		Timeout: 2 * time.Minute,
		Run: func(ctx context.Context, t *T) {
			env := t.Env
			if env.CredentialProviderConfig == "" || env.CredentialProviderBinDir == "" || env.CredentialProviderImage == "" {
				t.Skipf("needs --credential-provider-config, --credential-provider-bin-dir and --credential-provider-image")
			}
			provider := findProvider(t, env.CredentialProviderConfig, env.CredentialProviderImage)
			req := credentialproviderv1.CredentialProviderRequest{
				TypeMeta: metav1.TypeMeta{APIVersion: credentialproviderv1.SchemeGroupVersion.String(), Kind: "CredentialProviderRequest"},
				Image:    env.CredentialProviderImage,
			}
			if ta := provider.TokenAttributes; ta != nil {
				req.ServiceAccountToken = serviceAccountToken(ctx, t, ta.ServiceAccountTokenAudience)
			}
			resp := execPlugin(ctx, t, env.CredentialProviderBinDir, provider, req)
			auth, key := responseAuth(resp, env.CredentialProviderImage)
			if auth == nil {
				t.Fatalf("plugin %s answered no credential for image %s (auth keys: %v)", provider.Name, env.CredentialProviderImage, authKeys(resp))
			}
			cache := "unset"
			if resp.CacheDuration != nil {
				cache = resp.CacheDuration.Duration.String()
			}
			t.Logf("plugin %s answered a credential for %s (cacheKeyType %s, cacheDuration %s)", provider.Name, key, resp.CacheKeyType, cache)

			ref, err := name.ParseReference(env.CredentialProviderImage, name.Insecure)
			if err != nil {
				t.Fatalf("--credential-provider-image %q: %v", env.CredentialProviderImage, err)
			}
			desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: auth.Username, Password: auth.Password}))
			if err != nil {
				t.Fatalf("pull the manifest of %s with the plugin's credential: %v", ref, err)
			}
			t.Logf("pulled the manifest of %s with the credential: %s %s", ref, desc.MediaType, desc.Digest)
			_, err = remote.Get(ref, remote.WithContext(ctx))
			var terr *transport.Error
			switch {
			case err == nil:
				t.Errorf("an anonymous pull of %s succeeded: the registry does not require the credential, so the round trip proves nothing", ref)
			case errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden):
				t.Logf("an anonymous pull is refused: %d", terr.StatusCode)
			default:
				t.Errorf("an anonymous pull of %s failed otherwise than with 401 or 403: %v", ref, err)
			}
		},
	}
}

// findProvider reads a kubelet CredentialProviderConfig and returns the
// first provider whose matchImages match image, as the kubelet picks it.
func findProvider(t *T, path, image string) *kubeletconfigv1.CredentialProvider {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read --credential-provider-config: %v", err)
	}
	var cfg kubeletconfigv1.CredentialProviderConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("--credential-provider-config %s is not a kubelet.config.k8s.io/v1 CredentialProviderConfig: %v", path, err)
	}
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		for _, pattern := range p.MatchImages {
			if ok, err := MatchImage(pattern, image); err != nil {
				t.Errorf("provider %s: matchImages %q: %v", p.Name, pattern, err)
			} else if ok {
				t.Logf("provider %s matches %s with %q", p.Name, image, pattern)
				return p
			}
		}
	}
	t.Fatalf("no provider of %s matches image %s: the kubelet would pull it without credentials", path, image)
	return nil
}

// serviceAccountToken creates a service account in the run's namespace and
// a token of it for audience, as the kubelet sends the pod's.
func serviceAccountToken(ctx context.Context, t *T, audience string) string {
	sas := t.Env.Client.CoreV1().ServiceAccounts(t.Env.Namespace)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "credentials", Labels: map[string]string{RunLabel: t.Env.RunID}}}
	if _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s/%s: %v", t.Env.Namespace, sa.Name, err)
	}
	tr, err := sas.CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: func() *int64 { s := int64(600); return &s }(),
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of service account %s/%s for audience %q: %v", t.Env.Namespace, sa.Name, audience, err)
	}
	t.Logf("service-account-token mode: sending a token of %s/%s for audience %q", t.Env.Namespace, sa.Name, audience)
	return tr.Status.Token
}

// execPlugin runs the plugin as the kubelet does: <bin-dir>/<name> with its
// args and env, the request on stdin, the response on stdout.
func execPlugin(ctx context.Context, t *T, binDir string, p *kubeletconfigv1.CredentialProvider, req credentialproviderv1.CredentialProviderRequest) *credentialproviderv1.CredentialProviderResponse {
	if p.APIVersion != credentialproviderv1.SchemeGroupVersion.String() {
		t.Fatalf("provider %s: apiVersion %q: the suite speaks %s", p.Name, p.APIVersion, credentialproviderv1.SchemeGroupVersion)
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatalf("encode the request: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, pluginTimeout)
	defer cancel()
	bin := filepath.Join(binDir, p.Name)
	cmd := exec.CommandContext(ctx, bin, p.Args...)
	cmd.Env = os.Environ()
	for _, e := range p.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("plugin %s %s: %v: %s", bin, strings.Join(p.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	t.Logf("plugin %s answered in %v", p.Name, time.Since(start).Round(time.Millisecond))
	var resp credentialproviderv1.CredentialProviderResponse
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
		t.Fatalf("plugin %s printed no CredentialProviderResponse: %v: %q", p.Name, err, stdout.String())
	}
	if resp.APIVersion != p.APIVersion || resp.Kind != "CredentialProviderResponse" {
		t.Fatalf("plugin %s answered apiVersion %q kind %q, want %s CredentialProviderResponse", p.Name, resp.APIVersion, resp.Kind, p.APIVersion)
	}
	return &resp
}

// responseAuth is the credential of the response for image: the entry
// whose key matches it, as the kubelet's keyring looks it up.
func responseAuth(resp *credentialproviderv1.CredentialProviderResponse, image string) (*credentialproviderv1.AuthConfig, string) {
	for key, a := range resp.Auth {
		if ok, _ := MatchImage(key, image); ok {
			return &a, key
		}
	}
	return nil, ""
}

func authKeys(resp *credentialproviderv1.CredentialProviderResponse) []string {
	var keys []string
	for k := range resp.Auth {
		keys = append(keys, k)
	}
	return keys
}

// MatchImage reports whether a matchImages pattern matches image, by the
// kubelet's rules: as many dot-separated host parts, each matching its
// glob (filepath.Match); equal ports; the pattern's path a string prefix
// of the image's.
func MatchImage(pattern, image string) (bool, error) {
	p, err := schemelessURL(pattern)
	if err != nil {
		return false, err
	}
	i, err := schemelessURL(image)
	if err != nil {
		return false, err
	}
	pParts, pPort := splitHost(p)
	iParts, iPort := splitHost(i)
	if pPort != iPort || len(pParts) != len(iParts) || !strings.HasPrefix(i.Path, p.Path) {
		return false, nil
	}
	for k, glob := range pParts {
		ok, err := filepath.Match(glob, iParts[k])
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func schemelessURL(s string) (*url.URL, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil, err
	}
	u.Scheme = ""
	return u, nil
}

func splitHost(u *url.URL) (parts []string, port string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}
