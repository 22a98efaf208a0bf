package tools

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinDirOutsideACheckout: outside a checkout, a binary built by `make
// build` finds the tools of the checkout it was built in; without that it
// says what to do.
func TestBinDirOutsideACheckout(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	t.Chdir(t.TempDir())
	saved := builtBinDir
	t.Cleanup(func() { builtBinDir = saved })

	builtBinDir = ""
	if _, err := BinDir(); err == nil || !strings.Contains(err.Error(), EnvBinDir) {
		t.Errorf("outside a checkout, no recorded dir: err %v, want one naming %s", err, EnvBinDir)
	}
	builtBinDir = "/checkout/_output/tools/x/bin"
	if got, err := BinDir(); err != nil || got != builtBinDir {
		t.Errorf("outside a checkout: %q %v, want the recorded %q", got, err, builtBinDir)
	}
	t.Setenv(EnvBinDir, "/explicit")
	if got, _ := BinDir(); got != "/explicit" {
		t.Errorf("%s is not first: %q", EnvBinDir, got)
	}
}

// TestBinDirInsideACheckout: the enclosing checkout wins over the recorded dir.
func TestBinDirInsideACheckout(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	saved := builtBinDir
	t.Cleanup(func() { builtBinDir = saved })
	builtBinDir = "/elsewhere"
	got, err := BinDir()
	if err != nil || !strings.HasSuffix(filepath.ToSlash(got), "/bin") || got == builtBinDir {
		t.Errorf("inside the checkout: %q %v", got, err)
	}
}

// TestSharedModuleVersions: portside and the control-plane tools compile
// their shared modules at the same versions, so a fresh machine's first
// `make build` reuses what `make tools` compiled (hack/check-shared-deps.sh).
func TestSharedModuleVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("lists both modules' dependencies; skipped with -short")
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack", "check-shared-deps.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}

// TestReadVersionsANP: the checkout pins apiserver-network-proxy too.
func TestReadVersionsANP(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, err := ReadVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.ANP, "v0.") {
		t.Errorf("ANP_VERSION = %q", v.ANP)
	}
}
