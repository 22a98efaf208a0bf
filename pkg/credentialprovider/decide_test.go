package credentialprovider

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/cloud"
)

// cacheKeyCase is a row of testdata/cachekeys.json, the table shared with
// test/integration/credentialprovider, which checks every row end to end
// against the kubelet's own plugin client, cache and matcher. "{ns}" in a
// registry stands for the pulled image's first path segment (a provider
// answering per repository).
type cacheKeyCase struct {
	Name         string   `json:"name"`
	Image        string   `json:"image"`
	Registries   []string `json:"registries"`
	Scope        string   `json:"scope"`
	CacheKeyType string   `json:"cacheKeyType"`
	Others       []string `json:"others"`
}

func loadCacheKeyCases(t *testing.T) []cacheKeyCase {
	t.Helper()
	data, err := os.ReadFile("testdata/cachekeys.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []cacheKeyCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("%d cases", len(cases))
	}
	return cases
}

// namespace is the image's first path segment ("team" of r.example.com/team/app).
func namespace(image string) string {
	_, path, _ := strings.Cut(image, "/")
	ns, _, _ := strings.Cut(path, "/")
	return ns
}

func TestDecideCacheKeyType(t *testing.T) {
	for _, tc := range loadCacheKeyCases(t) {
		t.Run(tc.Name, func(t *testing.T) {
			var keys []authKey
			for _, r := range tc.Registries {
				k, err := parseAuthKey(strings.ReplaceAll(r, "{ns}", namespace(tc.Image)))
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			scope, err := checkScope(cloud.CredentialScope(tc.Scope))
			if err != nil {
				t.Fatal(err)
			}
			got, why := decideCacheKeyType(tc.Image, keys, scope)
			if string(got) != tc.CacheKeyType {
				t.Fatalf("cacheKeyType = %s, want %s", got, tc.CacheKeyType)
			}
			if (why != "") != (got == "Image" && scope == cloud.ScopeRegistry) {
				t.Fatalf("reason %q for %s from scope %s", why, got, scope)
			}
		})
	}
}

// TestAuthKeyHostMatches: the host half of the kubelet's URLsMatch, as
// coversRegistry needs it (the integration table checks it end to end).
func TestAuthKeyHostMatches(t *testing.T) {
	for _, tc := range []struct {
		key, host string
		want      bool
	}{
		{"registry.example.com", "registry.example.com", true},
		{"*.example.com", "registry.example.com", true},
		{"*.example.com", "a.b.example.com", false},
		{"*.*.com", "a.example.com", true},
		{"reg*.example.com", "registry.example.com", true},
		{"*.io", "registry.k8s.io", false},
		{"127.0.0.1:5000", "127.0.0.1:5000", true},
		{"127.0.0.1:5000", "127.0.0.1:5001", false},
		{"127.0.0.1", "127.0.0.1:5000", false},
		{"127.0.0.1:5000", "127.0.0.1", false},
		{"127.*.*.*:5000", "127.10.0.1:5000", true},
		{"[::1]:5000", "[::1]:5000", true},
		{"http://registry.example.com", "registry.example.com", true},
	} {
		k, err := parseAuthKey(tc.key)
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		if got := k.hostMatches(tc.host); got != tc.want {
			t.Errorf("%s matches %s = %v, want %v", tc.key, tc.host, got, tc.want)
		}
	}
}

func TestParseAuthKey(t *testing.T) {
	for _, tc := range []struct {
		key, path, wantErr string
	}{
		{key: "registry.example.com"},
		{key: "registry.example.com/", path: ""},
		{key: "registry.example.com/v1/", path: ""},
		{key: "registry.example.com/v2/team", path: "/team"},
		{key: "registry.example.com/team", path: "/team"},
		{key: "https://registry.example.com:5000/team/app", path: "/team/app"},
		{key: "", wantErr: "has no registry"},
		{key: "/team", wantErr: "is not a registry host"},
		{key: "reg%zz.example.com", wantErr: "is not a registry host"},
		{key: "[a.example.com", wantErr: "is not a registry host"},
	} {
		k, err := parseAuthKey(tc.key)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error = %v, want %q", tc.key, err, tc.wantErr)
			}
			continue
		}
		if err != nil || k.path != tc.path {
			t.Errorf("%q: path %q, %v; want %q", tc.key, k.path, err, tc.path)
		}
	}
}

func TestDecideCacheDuration(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		explicit *time.Duration
		expires  time.Time
		want     string // "nil" or a duration
		wantErr  string
	}{
		{name: "neither: the kubelet's default", want: "nil"},
		{name: "from the expiry", expires: now.Add(time.Hour), want: "55m0s"},
		{name: "explicit zero: not cached", explicit: CacheFor(0), expires: now.Add(time.Hour), want: "0s"},
		{name: "explicit zero, no expiry", explicit: CacheFor(0), want: "0s"},
		{name: "explicit, no expiry", explicit: CacheFor(10 * time.Minute), want: "10m0s"},
		{name: "explicit shorter than the expiry", explicit: CacheFor(time.Minute), expires: now.Add(time.Hour), want: "1m0s"},
		{name: "explicit never outlasts the credential", explicit: CacheFor(2 * time.Hour), expires: now.Add(time.Hour), want: "55m0s"},
		{name: "whole seconds", explicit: CacheFor(1500 * time.Millisecond), want: "1s"},
		{name: "negative", explicit: CacheFor(-time.Second), wantErr: "negative cache duration"},
		{name: "expired credential", explicit: CacheFor(0), expires: now.Add(-time.Second), wantErr: "check the clocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decideCacheDuration(tc.explicit, tc.expires, now)
			checkCacheDuration(t, "decideCacheDuration", d, err, tc.want, tc.wantErr)
		})
	}
}
