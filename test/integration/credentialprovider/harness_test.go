package credentialprovider

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/portside-io/portside/internal/credentialplugin/kubelettest"
)

var bins struct {
	once sync.Once
	dir  string
	err  error
}

// binaries builds portside and portside-credential-provider once per test
// binary run and returns the directory holding them.
func binaries(t testing.TB) string {
	t.Helper()
	bins.once.Do(func() {
		if bins.dir, bins.err = os.MkdirTemp("", "credprov-bin-"); bins.err == nil {
			bins.err = kubelettest.Build(bins.dir)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.dir
}

// installPlugin copies the lean plugin into a fresh kubelet plugin
// directory under name, as an operator would.
func installPlugin(t testing.TB, name string) string {
	t.Helper()
	src := filepath.Join(binaries(t), "portside-credential-provider")
	dir := t.TempDir()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
