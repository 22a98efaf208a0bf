package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/syncbuf"
	"github.com/portside-io/portside/internal/tools"
)

// BuildPortside compiles the portside binary into a temp dir of t and
// returns it with the repository's root (where `up` runs, as a user's
// checkout). Skipped with -short: what runs it needs a real control plane.
func BuildPortside(t testing.TB) (bin, root string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real control plane; skipped with -short")
	}
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(t.TempDir(), "portside")
	out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "portside")).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin, root
}

// StartUp runs `portside up` with args until it says it is ready (2
// minutes at most), and returns it with its output so far and beyond, and
// its exit.
func StartUp(t testing.TB, bin, root string, args ...string) (*exec.Cmd, *syncbuf.Buffer, <-chan error) {
	t.Helper()
	return StartUpWithin(t, 2*time.Minute, bin, root, args...)
}

// StartUpWithin is StartUp with a readiness deadline of its own (real
// nodes' first start builds images). The exit channel is closed after its
// one value, so a second reader (a cleanup after a failed start) does not
// wait forever.
func StartUpWithin(t testing.TB, ready time.Duration, bin, root string, args ...string) (*exec.Cmd, *syncbuf.Buffer, <-chan error) {
	t.Helper()
	// The CLI's default is real nodes where the machine allows it; these
	// tests exercise the simulated stand-ins unless they ask otherwise.
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--node-mode") }) {
		args = append([]string{"--node-mode=simulated"}, args...)
	}
	up := exec.Command(bin, append([]string{"up"}, args...)...)
	up.Dir = root
	// If the test binary dies (a go test timeout), up gets SIGTERM and
	// stops everything it started, instead of running on as an orphan.
	up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out := &syncbuf.Buffer{}
	up.Stdout, up.Stderr = out, out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait(); close(done) }()
	deadline := time.After(ready)
	for !strings.Contains(out.String(), "press Ctrl-C") {
		select {
		case err := <-done:
			t.Fatalf("portside up exited early: %v\n%s", err, out.String())
		case <-deadline:
			// SIGTERM first: up stops what it started (real nodes'
			// namespaces, mounts and cgroups too), which a kill would leave.
			_ = up.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				_ = up.Process.Kill()
			}
			t.Fatalf("portside up not ready after %s:\n%s", ready, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return up, out, done
}

// AssertNoProcessesUsing fails t for each live process with dir in its
// command line: what a test's `up` started must be gone when it is.
func AssertNoProcessesUsing(t testing.TB, dir string) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); strings.Contains(string(stat), ") Z ") {
			continue
		}
		t.Errorf("process still running: %s: %s", e.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
}

// StopUp runs `portside down` for data, waits for up (StartUp's) to exit,
// killing it after 30 s, and fails t for anything of data's still running.
func StopUp(t testing.TB, bin, data string, up *exec.Cmd, done <-chan error) {
	t.Helper()
	_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = up.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	AssertNoProcessesUsing(t, data)
}
