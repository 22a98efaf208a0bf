// Package e2e runs the portside binary as a user would.
package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/tools"
)

// buildPortside compiles the binary once per test into a temp dir.
func buildPortside(t *testing.T) (bin, root string) {
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

// syncBuffer is a bytes.Buffer safe for a process writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func assertNoProcessesUsing(t *testing.T, dir string) {
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

func TestUpOnce(t *testing.T) {
	bin, root := buildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	cmd := exec.Command(bin, "up", "--once", "--purge", "--data-dir", data)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Logf("portside up --once:\n%s", out)
	if err != nil {
		t.Fatalf("portside up --once: %v", err)
	}
	for _, want := range []string{"kube-apiserver ready at https://127.0.0.1:", "Kubernetes v1.37.2 serving", "export KUBECONFIG=", "kube-system", "stopping kube-apiserver and etcd"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	assertNoProcessesUsing(t, data)
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("--purge left %s behind (%v)", data, err)
	}
}

func TestUpThenDown(t *testing.T) {
	bin, root := buildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	up := exec.Command(bin, "up", "--data-dir", data)
	up.Dir = root
	var out syncBuffer
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	defer func() {
		_ = up.Process.Kill()
	}()
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(out.String(), "press Ctrl-C") {
		select {
		case err := <-done:
			t.Fatalf("portside up exited early: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("portside up not ready:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// A second `up` on the same data directory is refused with a clear message.
	second, _ := exec.Command(bin, "up", "--once", "--data-dir", data).CombinedOutput()
	if !strings.Contains(string(second), "already running") || !strings.Contains(string(second), "portside down") {
		t.Errorf("second up: %s", second)
	}
	downOut, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
	if err != nil {
		t.Fatalf("portside down: %v\n%s", err, downOut)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("portside up exit: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("portside up did not exit after portside down")
	}
	if !strings.Contains(out.String(), "state kept in") {
		t.Errorf("up output lacks the state message:\n%s", out.String())
	}
	assertNoProcessesUsing(t, data)
	if _, err := os.Stat(filepath.Join(data, "controlplane", "etcd")); err != nil {
		t.Errorf("state not kept: %v", err)
	}
}
