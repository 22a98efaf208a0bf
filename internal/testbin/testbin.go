// Package testbin gives tests that run Portside as a process (reliability
// runs) one portside binary per test binary: built from this checkout
// once (so -count=2 links once), or $PORTSIDE_RELIABILITY_BIN, a binary
// built elsewhere (e.g. of another commit, to show a test fails there).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/portside-io/portside/internal/tools"
)

var (
	once sync.Once
	bin  string
	dir  string
	err  error
)

// Portside returns the path of the portside binary, building it on first
// use; a build failure fails the test.
func Portside(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if b := os.Getenv("PORTSIDE_RELIABILITY_BIN"); b != "" {
			bin = b
			return
		}
		root, rerr := tools.RepoRoot()
		if rerr != nil {
			err = rerr
			return
		}
		if dir, err = os.MkdirTemp("", "portside-test-bin-"); err != nil {
			return
		}
		bin = filepath.Join(dir, "portside")
		// Static, as `make build` builds it: the image `up --install=chart`
		// makes of it has no libc (and the build cache is make build's).
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/portside")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build ./cmd/portside: %v\n%s", berr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Cleanup removes the binary Portside built; TestMain calls it after m.Run.
func Cleanup() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
