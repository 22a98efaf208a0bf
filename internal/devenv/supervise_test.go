package devenv

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/syncbuf"
)

// TestSupervisorRestartsWithBackoffAndStops: a child that dies on its own
// is restarted after the backoff, with a line saying so; stop ends the
// restarts and stops the current child.
func TestSupervisorRestartsWithBackoffAndStops(t *testing.T) {
	dir := t.TempDir()
	var out syncbuf.Buffer
	p := &progress{w: &out, start: time.Now()}
	starts := 0
	start := func() (*proc.Process, error) {
		starts++
		return proc.Start("child", "/bin/sh", []string{"-c", "sleep 30"}, nil, filepath.Join(dir, "child.log"))
	}
	first, err := proc.Start("child", "/bin/sh", []string{"-c", "echo dying; exit 3"}, nil, filepath.Join(dir, "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	sv := supervise(p, "child", "the child", first, time.Second, start)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "restarted (pid") {
		if time.Now().After(deadline) {
			t.Fatalf("not restarted:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "the child pid ") || !strings.Contains(out.String(), "exit status 3") || !strings.Contains(out.String(), "restarting in 1s") {
		t.Errorf("the restart line does not say which child exited, how, and when it restarts:\n%s", out.String())
	}
	cur := sv.current()
	if cur == first || starts != 1 {
		t.Fatalf("current child not replaced (starts %d)", starts)
	}
	sv.stop()
	select {
	case <-cur.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not stop the current child")
	}
	time.Sleep(1500 * time.Millisecond)
	if starts != 1 {
		t.Errorf("restarted after stop: %d starts", starts)
	}
}
