// Package credentialprovider tests Portside's kubelet image credential
// provider as the kubelet runs it: the kubelet's own plugin client
// (k8s.io/kubernetes/pkg/credentialprovider/plugin v1.37.2, through
// hack/tools/kubelet-credential-harness) execs the plugin, caches its
// answers, and the credentials it returns pull from the local cloud's OCI
// registry with a standard registry client; a real kube-apiserver issues
// the service-account tokens of token mode.
package credentialprovider

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
	"github.com/portside-io/portside/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
	if sdkBin.dir != "" {
		_ = os.RemoveAll(sdkBin.dir)
	}
	os.Exit(code)
}

// TestKubeletPullsWithPluginCredentials: matching images get credentials
// that pull; the kubelet's cache covers repeated pulls and other images of
// the registry (cacheKeyType Registry); other images never exec the plugin.
func TestKubeletPullsWithPluginCredentials(t *testing.T) {
	testenv.ControlPlane(t) // the package's control plane runs (or -short skips)
	c := startCloud(t, time.Hour)
	// Any binary name works: the kubelet runs <bin-dir>/<name>.
	binDir := installPlugin(t, "local-registry-credentials")
	config := sampleConfig(t, "credential-provider-config.yaml", c.registry, "local-registry-credentials", c.config)
	k := kubelettest.Start(t, config, binDir, "")

	image := c.registry + "/portside/hello:1.0"
	if _, err := kubelettest.Pull(image, nil); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("an anonymous pull must be refused with UNAUTHORIZED, got %v", err)
	}
	r := k.Lookup(t, image, kubelettest.Pod{})
	if !r.Found || len(r.Auths) != 1 || r.Execs != 1 {
		t.Fatalf("lookup = %+v, want one credential from one exec", r)
	}
	digest, err := kubelettest.Pull(image, &r.Auths[0])
	if err != nil {
		t.Fatalf("pull with the plugin's credential: %v", err)
	}
	if !strings.HasSuffix(c.seeded, "@"+digest) {
		t.Fatalf("pulled %s, seeded %s", digest, c.seeded)
	}

	// Within the cache duration: no exec, for the same image and for any
	// other image of the registry.
	for _, img := range []string{image, c.registry + "/portside/hello@" + digest, c.registry + "/team/other:2"} {
		if r := k.Lookup(t, img, kubelettest.Pod{}); !r.Found || r.Execs != 1 {
			t.Fatalf("lookup %s = %+v, want a cached credential (execs still 1)", img, r)
		}
	}
	// Images the config does not match: no credential, no exec.
	host, port, _ := strings.Cut(c.registry, ":")
	for _, img := range []string{"docker.io/library/nginx:1.27", "nginx", host + ":1" + port + "/portside/hello:1.0", "registry.example.com/portside/hello:1.0"} {
		if r := k.Lookup(t, img, kubelettest.Pod{}); r.Found || r.Execs != 1 {
			t.Fatalf("lookup %s = %+v, want nothing and no exec", img, r)
		}
	}
}

// TestCredentialExpiry: the plugin's cacheDuration follows the credential's
// lifetime, so the kubelet asks again before it expires; an expired
// credential no longer pulls.
func TestCredentialExpiry(t *testing.T) {
	testenv.ControlPlane(t)
	c := startCloud(t, 3*time.Second)
	binDir := installPlugin(t, "portside-credential-provider")
	config := sampleConfig(t, "credential-provider-config.yaml", c.registry, "portside-credential-provider", c.config)
	k := kubelettest.Start(t, config, binDir, "")
	image := c.registry + "/portside/hello:1.0"

	first := k.Lookup(t, image, kubelettest.Pod{})
	issued := time.Now()
	if !first.Found || first.Execs != 1 {
		t.Fatalf("lookup = %+v", first)
	}
	if _, err := kubelettest.Pull(image, &first.Auths[0]); err != nil {
		t.Fatalf("pull with a fresh credential: %v", err)
	}
	// 3 s of life → cached 2 s (less a tenth, in whole seconds): within it no
	// exec, after it one.
	if r := k.Lookup(t, image, kubelettest.Pod{}); r.Execs != 1 {
		t.Fatalf("lookup within the cache duration exec'd the plugin: %+v", r)
	}
	time.Sleep(time.Until(issued.Add(3500 * time.Millisecond)))
	if _, err := kubelettest.Pull(image, &first.Auths[0]); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("a pull with an expired credential must be refused, got %v", err)
	}
	second := k.Lookup(t, image, kubelettest.Pod{})
	if !second.Found || second.Execs != 2 || second.Auths[0].Password == first.Auths[0].Password {
		t.Fatalf("after the cache duration the kubelet must exec again for a new credential: %+v", second)
	}
	if _, err := kubelettest.Pull(image, &second.Auths[0]); err != nil {
		t.Fatalf("pull with the renewed credential: %v", err)
	}
}
