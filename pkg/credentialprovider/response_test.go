package credentialprovider

import (
	"strings"
	"testing"
	"time"

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
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			got := "nil"
			if d != nil {
				got = d.Duration.String()
			}
			if err != nil || got != tc.want {
				t.Fatalf("CacheDuration = %s, %v; want %s", got, err, tc.want)
			}
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
