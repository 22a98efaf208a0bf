package devenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/localcloud/server"
)

// TestRealNodeCredentialProvider: what real machines' kubelets get matches
// the registry's own host and its VPC name (the names pods use), runs the plugin with a cloud
// config of the cloud's VPC endpoint (the machine's loopback is its own)
// and a 0600 copy of the pull-only token, never the admin token.
func TestRealNodeCredentialProvider(t *testing.T) {
	env := &environment{layout: layout{dir: t.TempDir()}, registryHost: "127.0.0.1:41669"}
	if err := os.MkdirAll(env.cloud(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.cloud(), server.VPCEndpointFile), []byte("http://198.18.4.1:8780\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.cloud(), server.RegistryVPCEndpointFile), []byte("198.18.4.1:5000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pullToken, _, err := writeNodeToken(env.cloud())
	if err != nil {
		t.Fatal(err)
	}
	shared := env.nodesShared()
	if err := os.MkdirAll(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	path, err := realNodeCredentialProvider(env, shared)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Providers []struct {
			Name        string   `json:"name"`
			MatchImages []string `json:"matchImages"`
			Args        []string `json:"args"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal(readOrFail(t, path), &cfg); err != nil || len(cfg.Providers) != 1 {
		t.Fatalf("%s: %v %+v", path, err, cfg)
	}
	p := cfg.Providers[0]
	if want := []string{env.registryHost, "198.18.4.1:5000"}; p.Name != credentialPluginName || !slices.Equal(p.MatchImages, want) {
		t.Errorf("provider %q matching %q, want %q matching %q", p.Name, p.MatchImages, credentialPluginName, want)
	}
	cloudConfig := filepath.Join(shared, "cloud.yaml")
	if !slices.Contains(p.Args, "--cloud-config="+cloudConfig) {
		t.Errorf("args %q lack --cloud-config=%s", p.Args, cloudConfig)
	}
	var cc struct{ Endpoint, TokenFile string }
	if err := yaml.Unmarshal(readOrFail(t, cloudConfig), &cc); err != nil {
		t.Fatal(err)
	}
	if cc.Endpoint != "http://198.18.4.1:8780" || filepath.Dir(cc.TokenFile) != shared {
		t.Errorf("cloud config %+v: want the VPC endpoint and a token file in %s", cc, shared)
	}
	if fi, err := os.Stat(cc.TokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v %v, want 0600", cc.TokenFile, fi, err)
	}
	if got, want := string(readOrFail(t, cc.TokenFile)), string(readOrFail(t, pullToken)); got != want {
		t.Errorf("the machines' token is not the pull-only token")
	}
}

func readOrFail(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
