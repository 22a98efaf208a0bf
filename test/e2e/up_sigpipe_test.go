package e2e

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/testenv"
)

// TestUpStopsWhenItsReaderIsGone: when whoever reads `portside up`'s output
// is gone (a test binary killed by its timeout, `up | tee` interrupted),
// SIGTERM still stops everything up started: its shutdown lines go to a
// pipe without a reader, which must fail the write, not kill up with
// SIGPIPE mid-shutdown (its children would then be killed by their
// parent-death signal before the cloud removes what it made).
func TestUpStopsWhenItsReaderIsGone(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	up := exec.Command(bin, "up", "--node-mode=simulated", "--nodes=1", "--data-dir", data)
	up.Dir = root
	up.Stdout, up.Stderr = w, w
	up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = up.Process.Kill()
		_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "press Ctrl-C") {
				close(ready)
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(3 * time.Minute):
		t.Fatal("portside up not ready in 3 minutes")
	}
	r.Close() // the reader is gone
	if err := up.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("portside up did not stop in 2 minutes after SIGTERM")
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("portside up was killed by %v instead of stopping", ws.Signal())
		}
	}
	if _, err := os.Stat(filepath.Join(data, "portside-up.pid")); err == nil {
		t.Errorf("the pid file is left: up did not finish its shutdown")
	}
	testenv.AssertNoProcessesUsing(t, data)
}
