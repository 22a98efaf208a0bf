package credentialplugin

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
