package credentialprovider

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/credentialprovider"
)

func repoFile(t *testing.T, parts ...string) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(append([]string{root}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestSampleConfigsAreValid: the sample CredentialProviderConfigs decode
// strictly into the upstream kubelet config types and pass the kubelet's
// own loading and validation; broken variants do not.
func TestSampleConfigsAreValid(t *testing.T) {
	binDir := installPlugin(t, "portside-credential-provider")
	for _, file := range []string{"credential-provider-config.yaml", "credential-provider-config-serviceaccount.yaml"} {
		t.Run(file, func(t *testing.T) {
			data := repoFile(t, "deploy", "credential-provider", file)
			var cfg kubeletconfigv1.CredentialProviderConfig
			if err := yaml.UnmarshalStrict([]byte(data), &cfg); err != nil {
				t.Fatalf("strict decode into kubelet.config.k8s.io/v1 types: %v", err)
			}
			if cfg.APIVersion != "kubelet.config.k8s.io/v1" || cfg.Kind != "CredentialProviderConfig" || len(cfg.Providers) != 1 ||
				cfg.Providers[0].APIVersion != credentialprovider.APIVersion || cfg.Providers[0].DefaultCacheDuration == nil {
				t.Fatalf("config = %+v", cfg)
			}
			path := filepath.Join(t.TempDir(), file)
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := kubelettest.Validate(t, path, binDir); err != nil {
				t.Fatalf("the kubelet refuses the sample: %v", err)
			}
			for _, broken := range []struct{ name, from, to, want string }{
				{"typo in a field", "matchImages:", "matchImage:", "unknown field"},
				{"an older plugin API", "apiVersion: credentialprovider.kubelet.k8s.io/v1\n", "apiVersion: credentialprovider.kubelet.k8s.io/v1alpha2\n", "apiVersion"},
				{"no cache duration", `defaultCacheDuration: "5m"`, "", "defaultCacheDuration"},
			} {
				bad := strings.Replace(data, broken.from, broken.to, 1)
				if bad == data {
					t.Fatalf("%s: %q not in the sample", broken.name, broken.from)
				}
				if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := kubelettest.Validate(t, path, binDir); err == nil || !strings.Contains(err.Error(), broken.want) {
					t.Errorf("%s: the kubelet must refuse it naming %q, got %v", broken.name, broken.want, err)
				}
			}
		})
	}
}

// matchRow is a row of the matchImages table in docs/credential-provider.md:
// | `pattern` | `image` | yes/no |
var matchRow = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]+)` \\| (yes|no) ")

// TestDocsAsWritten: docs/credential-provider.md shows the sample configs
// verbatim, and every row of its matchImages table is what the kubelet's
// own matcher decides.
func TestDocsAsWritten(t *testing.T) {
	doc := repoFile(t, "docs", "credential-provider.md")
	for _, file := range []string{"credential-provider-config.yaml", "credential-provider-config-serviceaccount.yaml"} {
		sample := repoFile(t, "deploy", "credential-provider", file)
		// The doc may leave out the file's leading comment block.
		body := sample[strings.Index(sample, "apiVersion: kubelet.config.k8s.io/v1"):]
		if !strings.Contains(doc, body) {
			t.Errorf("docs/credential-provider.md does not show deploy/credential-provider/%s as it is", file)
		}
	}
	k := kubelettest.Start(t, writeMinimalConfig(t), installPlugin(t, "portside-credential-provider"), "")
	rows := 0
	for _, line := range strings.Split(doc, "\n") {
		m := matchRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		if got := k.Match(t, m[1], m[2]); got != (m[3] == "yes") {
			t.Errorf("docs say matchImages %q applied to %q is %s; the kubelet says %v", m[1], m[2], m[3], got)
		}
	}
	if rows < 8 {
		t.Fatalf("found %d rows of the matchImages table, want at least 8", rows)
	}
}

func writeMinimalConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	data := "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: portside-credential-provider\n  matchImages: [\"127.0.0.1:5000\"]\n  defaultCacheDuration: 5m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
