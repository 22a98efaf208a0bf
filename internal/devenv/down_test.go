package devenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests use only Down and newLayout, so they also run against the
// code before pid identities and data-directory markers (and fail there).

// startSleep starts an unrelated process that must survive `down`.
func startSleep(t *testing.T) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd, exited
}

// TestDownSparesUnrelatedProcess: a pid file naming a live process that
// is not `portside up` (its PID was reused) is removed as stale, and the
// process is not signalled.
func TestDownSparesUnrelatedProcess(t *testing.T) {
	for name, content := range map[string]func(pid int) string{
		"bare pid (older portside)": func(pid int) string { return strconv.Itoa(pid) + "\n" },
		"other start time": func(pid int) string {
			boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
			return strconv.Itoa(pid) + "\nstarttime 1\nboot_id " + strings.TrimSpace(string(boot)) + "\nstarted 2026-01-02T03:04:05Z\n"
		},
	} {
		t.Run(name, func(t *testing.T) {
			sleep, exited := startSleep(t)
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "portside-up.pid")
			writeFile(t, pidFile, content(sleep.Process.Pid))
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := Down(ctx, dir, false, &out)
			select {
			case <-exited:
				t.Fatalf("down killed unrelated pid %d (err %v); output:\n%s", sleep.Process.Pid, err, out.String())
			case <-time.After(300 * time.Millisecond):
			}
			if err != nil {
				t.Fatalf("down: %v\n%s", err, out.String())
			}
			want := "pid " + strconv.Itoa(sleep.Process.Pid) + " is no longer portside up ("
			if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "not signalling it; removing the stale pid file") {
				t.Errorf("output lacks %q and the stale pid file message:\n%s", want, out.String())
			}
			if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
				t.Errorf("stale pid file not removed (%v)", err)
			}
		})
	}
}

// TestDownGarbagePIDFile: a pid file that names no process clearly is an
// error, not "nothing is running", and is kept for the user to look at.
func TestDownGarbagePIDFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "portside-up.pid"), "not a pid\n")
	var out bytes.Buffer
	err := Down(context.Background(), dir, false, &out)
	if err == nil || !strings.Contains(err.Error(), "is not a portside up pid file") || !strings.Contains(err.Error(), "not signalling anything") {
		t.Fatalf("down = %v, want a clear error; output:\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "portside-up.pid")); err != nil {
		t.Errorf("pid file removed: %v", err)
	}
}

// TestPurgeOnlyWhatUpCreated: --purge removes a directory `up` created,
// or one with an older `up`'s layout, and refuses any other.
func TestPurgeOnlyWhatUpCreated(t *testing.T) {
	ctx := context.Background()
	t.Run("created by up", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "up")
		if _, err := newLayout(dir); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "network.json"), "{}\n")
		var out bytes.Buffer
		if err := Down(ctx, dir, true, &out); err != nil {
			t.Fatalf("down --purge: %v\n%s", err, out.String())
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s not removed (%v)", dir, err)
		}
	})
	t.Run("older portside's layout", func(t *testing.T) {
		dir := t.TempDir()
		for _, d := range []string{"logs", "cloud", "ccm", "controlplane"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, filepath.Join(dir, "cloud", "state.db"), "x")
		if err := Down(ctx, dir, true, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s not removed (%v)", dir, err)
		}
	})
	for name, extra := range map[string]string{"no layout": "", "older layout plus a user's file": "logs cloud ccm"} {
		t.Run("refused: "+name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range strings.Fields(extra) {
				if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			precious := filepath.Join(dir, "thesis.tex")
			writeFile(t, precious, "precious")
			var out bytes.Buffer
			err := Down(ctx, dir, true, &out)
			if err == nil || !strings.Contains(err.Error(), dir+" was not created by portside up (no .portside-up marker") ||
				!strings.Contains(err.Error(), "not removing it; remove it yourself if you are sure") {
				t.Errorf("down --purge = %v, want a refusal naming %s", err, dir)
			}
			if _, err := os.Stat(precious); err != nil {
				t.Errorf("precious file gone: %v", err)
			}
		})
	}
}

// TestUpRefusesForeignDirectory: `up` does not take over a non-empty
// directory it did not create (its --purge would remove it), but adopts
// an empty one.
func TestUpRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "thesis.tex"), "precious")
	_, err := newLayout(dir)
	if err == nil || !strings.Contains(err.Error(), "is not empty and was not created by portside up") {
		t.Errorf("newLayout of a foreign directory = %v, want a refusal", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the foreign directory was changed: %v", entries)
	}
	empty := t.TempDir()
	if _, err := newLayout(empty); err != nil {
		t.Fatalf("empty directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, ".portside-up")); err != nil {
		t.Errorf("adopted empty directory not marked: %v", err)
	}
}
