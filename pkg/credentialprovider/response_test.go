package credentialprovider

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

func TestCacheDuration(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		expires time.Time
		want    string // "nil" or a duration
		wantErr string
	}{
		{name: "unknown expiry: kubelet default", expires: time.Time{}, want: "nil"},
		{name: "1h: renew 5m early", expires: now.Add(time.Hour), want: "55m0s"},
		{name: "12h (ECR-like): margin capped at 5m", expires: now.Add(12 * time.Hour), want: "11h55m0s"},
		{name: "10m: a tenth", expires: now.Add(10 * time.Minute), want: "9m0s"},
		{name: "90s", expires: now.Add(90 * time.Second), want: "1m21s"},
		{name: "sub-second remainder truncated", expires: now.Add(10*time.Second + 700*time.Millisecond), want: "9s"},
		{name: "about to expire: do not cache", expires: now.Add(500 * time.Millisecond), want: "0s"},
		{name: "expired", expires: now.Add(-time.Second), wantErr: "expired at 2026-11-30T11:59:59Z"},
		{name: "expires now", expires: now, wantErr: "check the clocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := CacheDuration(tc.expires, now)
			checkCacheDuration(t, "CacheDuration", d, err, tc.want, tc.wantErr)
		})
	}
}

func TestNewResponse(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cred := func(scope cloud.CredentialScope) *cloud.RegistryCredential {
		return &cloud.RegistryCredential{Registry: "127.0.0.1:5000", Username: "u", Password: "p", ExpiresAt: now.Add(time.Hour), Scope: scope}
	}
	for _, tc := range []struct {
		name    string
		cred    *cloud.RegistryCredential
		keyType v1.PluginCacheKeyType
		wantErr string
	}{
		{name: "default scope is the registry", cred: cred(""), keyType: v1.RegistryPluginCacheKeyType},
		{name: "registry", cred: cred(cloud.ScopeRegistry), keyType: v1.RegistryPluginCacheKeyType},
		{name: "image", cred: cred(cloud.ScopeImage), keyType: v1.ImagePluginCacheKeyType},
		{name: "global", cred: cred(cloud.ScopeGlobal), keyType: v1.GlobalPluginCacheKeyType},
		{name: "unknown scope", cred: cred("Repository"), wantErr: `unknown scope "Repository"`},
		{name: "nil credential", cred: nil, wantErr: "no credential"},
		{name: "no registry", cred: &cloud.RegistryCredential{Username: "u"}, wantErr: "without a registry"},
		{name: "expired", cred: &cloud.RegistryCredential{Registry: "r", ExpiresAt: now.Add(-time.Minute)}, wantErr: "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := NewResponse(tc.cred, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.APIVersion != APIVersion || resp.Kind != "CredentialProviderResponse" || resp.CacheKeyType != tc.keyType ||
				resp.CacheDuration == nil || resp.CacheDuration.Duration != 55*time.Minute ||
				resp.Auth["127.0.0.1:5000"] != (v1.AuthConfig{Username: "u", Password: "p"}) || len(resp.Auth) != 1 {
				t.Fatalf("response = %+v", resp)
			}
		})
	}
}

// TestNewResponsePathPrefix: a Registry-scoped credential for a path prefix
// is cached per image, never under the host, where other repositories of
// the registry would find it and get no credential.
func TestNewResponsePathPrefix(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, scope := range []cloud.CredentialScope{"", cloud.ScopeRegistry} {
		resp, err := NewResponse(&cloud.RegistryCredential{Registry: "registry.example.com/team", Username: "u", Password: "p", Scope: scope}, now)
		if err != nil || resp.CacheKeyType != v1.ImagePluginCacheKeyType {
			t.Fatalf("scope %q: response = %+v, %v; want cacheKeyType Image", scope, resp, err)
		}
	}
}

func TestNewResponseFor(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	gcr := func(reg string, exp time.Duration) cloud.RegistryCredential {
		return cloud.RegistryCredential{Registry: reg, Username: "oauth2accesstoken", Password: "tok", ExpiresAt: now.Add(exp)}
	}
	for _, tc := range []struct {
		name    string
		image   string
		r       *Result
		want    string // the response's JSON
		wantErr string
	}{
		{name: "several entries (GCP-like), the earliest expiry", image: "us.gcr.io/p/app",
			r:    &Result{Credentials: []cloud.RegistryCredential{gcr("*.gcr.io", time.Hour), gcr("gcr.io", time.Hour), gcr("*.pkg.dev", 10*time.Minute)}},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"9m0s","auth":{"*.gcr.io":{"username":"oauth2accesstoken","password":"tok"},"*.pkg.dev":{"username":"oauth2accesstoken","password":"tok"},"gcr.io":{"username":"oauth2accesstoken","password":"tok"}}}`},
		{name: "no credentials: success, the kubelet's default cache", image: "docker.io/library/nginx",
			r:    &Result{},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry"}`},
		{name: "no credentials for this image only, an hour", image: "docker.io/library/nginx",
			r:    &Result{Scope: cloud.ScopeImage, CacheDuration: CacheFor(time.Hour)},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","cacheDuration":"1h0m0s"}`},
		{name: "explicit zero is sent", image: "r.example.com/a",
			r:    &Result{Credentials: []cloud.RegistryCredential{gcr("r.example.com", time.Hour)}, CacheDuration: CacheFor(0)},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"0s","auth":{"r.example.com":{"username":"oauth2accesstoken","password":"tok"}}}`},
		{name: "not set and no expiry: left out", image: "r.example.com/a",
			r:    &Result{Credentials: []cloud.RegistryCredential{{Registry: "r.example.com", Username: "u", Password: "p"}}},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","auth":{"r.example.com":{"username":"u","password":"p"}}}`},
		{name: "the narrowest credential scope", image: "r.example.com/a",
			r:    &Result{Credentials: []cloud.RegistryCredential{{Registry: "r.example.com", Scope: cloud.ScopeGlobal}, {Registry: "s.example.com", Scope: cloud.ScopeImage}}},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","auth":{"r.example.com":{"username":"","password":""},"s.example.com":{"username":"","password":""}}}`},
		{name: "the result's scope wins", image: "r.example.com/a",
			r:    &Result{Scope: cloud.ScopeGlobal, Credentials: []cloud.RegistryCredential{{Registry: "r.example.com", Scope: cloud.ScopeImage}}},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Global","auth":{"r.example.com":{"username":"","password":""}}}`},
		{name: "a path prefix: per image", image: "r.example.com/team/a",
			r:    &Result{Credentials: []cloud.RegistryCredential{{Registry: "r.example.com/team"}}},
			want: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","auth":{"r.example.com/team":{"username":"","password":""}}}`},
		{name: "nil result", r: nil, wantErr: "return a Result with no Credentials"},
		{name: "duplicate registry", r: &Result{Credentials: []cloud.RegistryCredential{{Registry: "r.example.com"}, {Registry: "r.example.com"}}}, wantErr: `two credentials for registry "r.example.com"`},
		{name: "an entry without registry", r: &Result{Credentials: []cloud.RegistryCredential{{Registry: "r.example.com"}, {}}}, wantErr: "credential 2: a credential has no registry"},
		{name: "a registry that is no host", r: &Result{Credentials: []cloud.RegistryCredential{{Registry: "/team"}}}, wantErr: `credential 1: credential registry "/team" is not a registry host`},
		{name: "unknown result scope", r: &Result{Scope: "Repo"}, wantErr: `unknown scope "Repo"`},
		{name: "negative cache duration", r: &Result{CacheDuration: CacheFor(-time.Minute)}, wantErr: "negative cache duration"},
		{name: "one expired among several", r: &Result{Credentials: []cloud.RegistryCredential{gcr("a.example.com", time.Hour), gcr("b.example.com", -time.Minute)}}, wantErr: "expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := NewResponseFor(tc.image, tc.r, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(resp)
			if err != nil || string(got) != tc.want {
				t.Fatalf("response =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// checkCacheDuration checks a cache duration decision: the error contains
// wantErr when one is wanted, else the duration is want ("nil" for none).
func checkCacheDuration(t *testing.T, what string, d *metav1.Duration, err error, want, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%s: error = %v, want %q", what, err, wantErr)
		}
		return
	}
	got := "nil"
	if d != nil {
		got = d.Duration.String()
	}
	if err != nil || got != want {
		t.Fatalf("%s = %s, %v; want %s", what, got, err, want)
	}
}
