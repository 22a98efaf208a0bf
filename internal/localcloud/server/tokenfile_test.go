package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnsureTokenFileModes: a generated token file is 0600 and read back;
// an existing one group or others may read is refused with the fix.
func TestEnsureTokenFileModes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TokenFile)
	tok, err := EnsureToken(path)
	if err != nil || tok == "" {
		t.Fatalf("generate: %q %v", tok, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated token file mode: %v %v, want 0600", fi.Mode(), err)
	}
	if again, err := EnsureToken(path); err != nil || again != tok {
		t.Fatalf("read back: %q %v, want %q", again, err, tok)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureToken(path); err == nil || !strings.Contains(err.Error(), "mode 0640") || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("0640 token file: %v, want a refusal naming its mode and `chmod 600 %s`", err, path)
	}
	if data, _ := os.ReadFile(path); strings.TrimSpace(string(data)) != tok {
		t.Fatalf("a refused token file was rewritten: %q", data)
	}
}
