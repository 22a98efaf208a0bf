package credentialprovider

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/credentialprovider"
)

// sdkAnswer is the SDK test plugin's (testdata/sdkplugin) answer for any
// image: a credential per registry, "{ns}" standing for the image's first
// path segment, the resolved registry as its password; NoCache answers
// with cacheDuration 0, otherwise it is left out.
type sdkAnswer struct {
	Registries []string `json:"registries"`
	Scope      string   `json:"scope"`
	NoCache    bool     `json:"noCache"`
}

var sdkBin struct {
	once sync.Once
	dir  string
	err  error
}

// sdkPlugin builds testdata/sdkplugin once per test binary run and returns
// its path.
func sdkPlugin(t *testing.T) string {
	t.Helper()
	sdkBin.once.Do(func() {
		root, err := tools.RepoRoot()
		if err != nil {
			sdkBin.err = err
			return
		}
		if sdkBin.dir, sdkBin.err = os.MkdirTemp("", "credprov-sdkplugin-"); sdkBin.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(sdkBin.dir, "sdkplugin"), "./test/integration/credentialprovider/testdata/sdkplugin")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			sdkBin.err = fmt.Errorf("go build testdata/sdkplugin: %v\n%s", err, out)
		}
	})
	if sdkBin.err != nil {
		t.Fatal(sdkBin.err)
	}
	return filepath.Join(sdkBin.dir, "sdkplugin")
}

// sdkKubelet starts a kubelet harness whose only plugin is the SDK test
// plugin answering a, for images of the given registries.
func sdkKubelet(t *testing.T, a sdkAnswer, registries []string) *kubelettest.Kubelet {
	t.Helper()
	binDir := t.TempDir()
	if err := os.Symlink(sdkPlugin(t), filepath.Join(binDir, "sdk-test-plugin")); err != nil {
		t.Fatal(err)
	}
	answer, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	config := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
		"providers": []map[string]any{{
			"name": "sdk-test-plugin", "apiVersion": credentialprovider.APIVersion,
			"matchImages": registries, "defaultCacheDuration": "5m",
			"env": []map[string]string{{"name": "PORTSIDE_SDK_TEST_PLUGIN", "value": string(answer)}},
		}},
	}
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return kubelettest.Start(t, path, binDir, "")
}

// cacheKeyCase is a row of pkg/credentialprovider/testdata/cachekeys.json.
type cacheKeyCase struct {
	Name         string   `json:"name"`
	Image        string   `json:"image"`
	Registries   []string `json:"registries"`
	Scope        string   `json:"scope"`
	CacheKeyType string   `json:"cacheKeyType"`
	Others       []string `json:"others"`
}

func passwords(r kubelettest.LookupReply) []string {
	var p []string
	for _, a := range r.Auths {
		p = append(p, a.Password)
	}
	slices.Sort(p)
	return p
}

// TestSDKResultThroughTheKubelet runs every row of the SDK's cache-key
// table (pkg/credentialprovider/testdata/cachekeys.json, whose decisions
// the SDK's unit test checks) through the kubelet's own plugin client,
// cache and keyring matching: after a pull of the row's image, each other
// image of the registry gets exactly the credentials the kubelet gives it
// when nothing is cached (a second harness whose plugin answers with
// cacheDuration 0, so it runs for every pull), and the plugin runs again
// exactly when the row's cacheKeyType says (Image: per image; Registry,
// Global: not within the cache). It proves several auth entries, success
// with no credentials (cached), an explicit cacheDuration 0 (never cached)
// and a left-out one (the config's default) as the kubelet reads them.
func TestSDKResultThroughTheKubelet(t *testing.T) {
	var cases []cacheKeyCase
	if err := json.Unmarshal([]byte(repoFile(t, "pkg", "credentialprovider", "testdata", "cachekeys.json")), &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var hosts []string
			for _, img := range append([]string{tc.Image}, tc.Others...) {
				if h, _, _ := strings.Cut(img, "/"); !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
			a := sdkAnswer{Registries: tc.Registries, Scope: tc.Scope}
			warm := sdkKubelet(t, a, hosts)
			a.NoCache = true
			fresh := sdkKubelet(t, a, hosts)

			execs := 0
			for i, img := range append([]string{tc.Image}, tc.Others...) {
				got := warm.Lookup(t, img, kubelettest.Pod{})
				want := fresh.Lookup(t, img, kubelettest.Pod{})
				if want.Execs != i+1 {
					t.Fatalf("cacheDuration 0: the kubelet must run the plugin for every pull, ran it %d times for %d pulls", want.Execs, i+1)
				}
				if !slices.Equal(passwords(got), passwords(want)) || got.Found != want.Found {
					t.Errorf("%s after a pull of %s: the kubelet gives %v (found %v), but %v (found %v) uncached",
						img, tc.Image, passwords(got), got.Found, passwords(want), want.Found)
				}
				if i == 0 || tc.CacheKeyType == "Image" {
					execs++
				}
				if got.Execs != execs {
					t.Errorf("%s: the plugin ran %d times in all, want %d (cacheKeyType %s)", img, got.Execs, execs, tc.CacheKeyType)
				}
			}
			if len(tc.Registries) == 0 {
				if r := warm.Lookup(t, tc.Image, kubelettest.Pod{}); r.Found || r.Execs != 1 {
					t.Errorf("success with no credentials must be cached: %+v", r)
				}
			}
		})
	}
}

// TestSDKNoCredentialsIsCachedForTheDefault: "success with no credentials"
// without a cacheDuration is cached for the config's defaultCacheDuration,
// so repeated pulls of images the provider does not serve do not run the
// plugin; the same answer with cacheDuration 0 runs it every time.
func TestSDKNoCredentialsIsCachedForTheDefault(t *testing.T) {
	images := []string{"docker.io/library/nginx:1.27", "docker.io/library/nginx:1.28"}
	for _, noCache := range []bool{false, true} {
		k := sdkKubelet(t, sdkAnswer{NoCache: noCache}, []string{"docker.io"})
		var r kubelettest.LookupReply
		start := time.Now()
		for range 3 {
			for _, img := range images {
				r = k.Lookup(t, img, kubelettest.Pod{})
				if r.Found {
					t.Fatalf("no credentials, yet the kubelet found %+v", r)
				}
			}
		}
		want := 1
		if noCache {
			want = 6
		}
		if r.Execs != want {
			t.Fatalf("noCache %v: the plugin ran %d times for 6 pulls, want %d", noCache, r.Execs, want)
		}
		t.Logf("noCache %v: 6 lookups in %s", noCache, time.Since(start))
	}
}
