package netproxy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/tools"
)

// portsideBin, as a serverBin or agentBin, is the portside binary built
// for this test run.
const portsideBin = "<portside>"

// procMarkerEnv is set, in every process a test starts, to the test's
// directory.
const procMarkerEnv = "PORTSIDE_NETPROXY_TEST_DIR"

var portside struct {
	once sync.Once
	dir  string // removed by TestMain
	path string
	err  error
}

// portsideBinary builds ./cmd/portside once per test binary run (only when
// a test needs it) and returns its path.
func portsideBinary(t *testing.T) string {
	t.Helper()
	portside.once.Do(func() {
		root, err := tools.RepoRoot()
		if err != nil {
			portside.err = err
			return
		}
		if portside.dir, err = os.MkdirTemp("", "pxy-bin-"); err != nil {
			portside.err = err
			return
		}
		path := filepath.Join(portside.dir, "portside")
		began := time.Now()
		cmd := exec.Command("go", "build", "-o", path, "./cmd/portside")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			portside.err = fmt.Errorf("go build ./cmd/portside: %v\n%s", err, out)
			return
		}
		t.Logf("built %s in %v", path, time.Since(began).Round(time.Millisecond))
		portside.path = path
	})
	if portside.err != nil {
		t.Fatal(portside.err)
	}
	return portside.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if portside.dir != "" {
		// Every portside process has the binary's path in its command line.
		if left := processesUsing(portside.dir); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: processes of the portside binary still running after the tests:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		}
		_ = os.RemoveAll(portside.dir)
	}
	os.Exit(code)
}

// assertNoProcessesUsing fails t if a live process has dir in its command
// line, or dir as its procMarkerEnv.
func assertNoProcessesUsing(t testing.TB, dir string) {
	t.Helper()
	for _, p := range processesUsing(dir) {
		t.Errorf("process still running: %s", p)
	}
}

func processesUsing(dir string) []string {
	var found []string
	marker := []byte(procMarkerEnv + "=" + dir)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		pdir := filepath.Join("/proc", e.Name())
		cmdline, err := os.ReadFile(filepath.Join(pdir, "cmdline"))
		if err != nil {
			continue
		}
		environ, _ := os.ReadFile(filepath.Join(pdir, "environ"))
		uses := false
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if a := string(arg); a == dir || strings.Contains(a, dir+"/") {
				uses = true
			}
		}
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if bytes.Equal(kv, marker) {
				uses = true
			}
		}
		if !uses {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join(pdir, "stat")); strings.Contains(string(stat), ") Z ") {
			continue
		}
		found = append(found, e.Name()+": "+strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " "))
	}
	return found
}
