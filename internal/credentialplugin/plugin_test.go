package credentialplugin

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portside-io/portside/pkg/cloud"
)

// TestSharedTokenFileRefused: the plugin refuses a cloud token file group
// or others may read, naming it, its mode and the fix, before any request
// to the cloud.
func TestSharedTokenFileRefused(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "cloud.yaml")
	// Port 1 on loopback: a reached cloud would fail differently.
	if err := os.WriteFile(config, []byte("endpoint: http://127.0.0.1:1\ntokenFile: "+tokenFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"127.0.0.1:5000/a/b:1"}`
	var stdout, stderr bytes.Buffer
	code := Main("portside-credential-provider", []string{"--cloud-config", config}, strings.NewReader(req), &stdout, &stderr)
	msg := stderr.String()
	if code == 0 || stdout.Len() != 0 || !strings.Contains(msg, tokenFile) || !strings.Contains(msg, "0644") || !strings.Contains(msg, "chmod 600 "+tokenFile) {
		t.Fatalf("exit %d, stdout %q, stderr %q: want a refusal naming the file, its mode and `chmod 600`", code, stdout.String(), msg)
	}
}

// noCredentials is a provider without the registry-credentials capability.
type noCredentials struct{}

func (noCredentials) ProviderName() string                                   { return "no-credentials" }
func (noCredentials) Instances() (cloud.Instances, bool)                     { return nil, false }
func (noCredentials) LoadBalancers() (cloud.LoadBalancers, bool)             { return nil, false }
func (noCredentials) Routes() (cloud.Routes, bool)                           { return nil, false }
func (noCredentials) Volumes() (cloud.Volumes, bool)                         { return nil, false }
func (noCredentials) RegistryCredentials() (cloud.RegistryCredentials, bool) { return nil, false }

func init() {
	cloud.MustRegister("test-no-credentials", func(context.Context, io.Reader) (cloud.Provider, error) { return noCredentials{}, nil })
}

// TestMainRefusals: arguments the kubelet never passes, and a provider
// that cannot answer, are refused with the fix named, and nothing is
// written to stdout (the kubelet would read it as a response).
func TestMainRefusals(t *testing.T) {
	req := `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"127.0.0.1:5000/a/b:1"}`
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a stray argument", []string{"get-credentials"}, `unexpected arguments ["get-credentials"]: the request comes on stdin`},
		{"a provider without registry credentials", []string{"--cloud-provider=test-no-credentials"},
			`cloud provider "test-no-credentials" has no registry-credentials capability: remove this plugin`},
	} {
		var stdout, stderr bytes.Buffer
		code := Main("portside-credential-provider", tc.args, strings.NewReader(req), &stdout, &stderr)
		if code == 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want a refusal with %q", tc.name, code, stdout.String(), stderr.String(), tc.want)
		}
	}
}
