package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/testenv"
)

// TestDownAndUpLeaveForeignThingsAlone: `portside down --purge` with a pid
// file naming a live process that is not `portside up` (a reused PID)
// neither signals it nor removes a directory `up` did not create, and
// `portside up` does not take over such a directory.
func TestDownAndUpLeaveForeignThingsAlone(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()
	defer func() { _ = sleep.Process.Kill(); <-exited }()

	dir := t.TempDir()
	precious := filepath.Join(dir, "thesis.tex")
	if err := os.WriteFile(precious, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(sleep.Process.Pid)
	if err := os.WriteFile(filepath.Join(dir, "portside-up.pid"), []byte(pid+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "down", "--purge", "--data-dir", dir).CombinedOutput()
	t.Logf("portside down --purge: %v\n%s", err, out)
	select {
	case <-exited:
		t.Fatalf("portside down killed unrelated pid %s", pid)
	case <-time.After(300 * time.Millisecond):
	}
	for _, want := range []string{
		"pid " + pid + " is no longer portside up (", "not signalling it; removing the stale pid file",
		dir + " was not created by portside up (no .portside-up marker", "not removing it; remove it yourself if you are sure",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("down output lacks %q", want)
		}
	}
	if err == nil {
		t.Error("down --purge of a foreign directory succeeded")
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("precious file gone: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up := exec.CommandContext(ctx, bin, "up", "--node-mode=simulated", "--once", "--purge", "--data-dir", dir)
	up.Dir = root
	out, err = up.CombinedOutput()
	t.Logf("portside up --once --purge: %v\n%s", err, out)
	if err == nil || !strings.Contains(string(out), "is not empty and was not created by portside up") {
		t.Errorf("up did not refuse the foreign directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("up changed the foreign directory: %v", entries)
	}
}
