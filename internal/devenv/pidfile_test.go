package devenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/proc"
)

func TestVerifyUp(t *testing.T) {
	written := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	up := proc.Identity{PID: 4242, StartTime: 1000, BootID: "boot-1", Started: written.Add(-time.Second), Args: []string{"/x/portside", "up"}}
	rec := pidRecord{Identity: up, written: written}
	legacy := pidRecord{Identity: proc.Identity{PID: 4242}, legacy: true, written: written}
	with := func(f func(*proc.Identity)) proc.Identity { id := up; f(&id); return id }
	sleep := with(func(id *proc.Identity) {
		id.StartTime, id.Started, id.Args = 5000, written.Add(time.Minute), []string{"sleep", "60"}
	})
	gone := fmt.Errorf("pid 4242: %w", proc.ErrGone)
	cases := []struct {
		name      string
		rec       pidRecord
		cur       proc.Identity
		lookupErr error
		running   bool
		stale     string // substring; "" means not stale
		err       bool
	}{
		{"matching", rec, up, nil, true, "", false},
		{"same pid, other start time", rec, sleep, nil, false, `is no longer portside up (started at 2026-11-30 `, false},
		{"same pid and start time, other boot", rec, with(func(id *proc.Identity) { id.BootID = "boot-2" }), nil, false, "restarted", false},
		{"missing process", rec, proc.Identity{}, gone, false, "no such process", false},
		{"cannot read the process", rec, proc.Identity{}, fs.ErrPermission, false, "", true},
		{"bare pid, portside up since before the file", legacy, up, nil, true, "", false},
		{"bare pid, another command", legacy, sleep, nil, false, `it is now "sleep 60"`, false},
		{"bare pid, portside up started after the file", legacy, with(func(id *proc.Identity) { id.Started = written.Add(time.Hour) }), nil, false, "pid file written at", false},
		{"bare pid, missing process", legacy, proc.Identity{}, gone, false, "no such process", false},
	}
	for _, tc := range cases {
		running, stale, err := verifyUp(tc.rec, tc.cur, tc.lookupErr)
		if running != tc.running || (err != nil) != tc.err || (tc.stale == "") != (stale == "") || !strings.Contains(stale, tc.stale) {
			t.Errorf("%s: running %v, stale %q, err %v; want %v, %q, error %v", tc.name, running, stale, err, tc.running, tc.stale, tc.err)
		}
		if stale != "" && !strings.HasPrefix(stale, "pid 4242 is no longer portside up (") {
			t.Errorf("%s: stale message %q does not name the pid", tc.name, stale)
		}
	}
}

func TestReadPIDFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, err string
	}{
		{"empty", "", "is not a portside up pid file"},
		{"text", "hello\n", "is not a portside up pid file"},
		{"negative", "-3\n", "is not a portside up pid file"},
		{"no boot id", "12\nstarttime 5\n", "no starttime or boot_id"},
		{"bad start time", "12\nstarttime x\nboot_id b\n", "starttime"},
		{"bare pid", "12\n", ""},
		{"full", "12\nstarttime 5\nboot_id b\nstarted 2026-11-30T20:05:27Z\n", ""},
	} {
		path := filepath.Join(dir, tc.name)
		writeFile(t, path, tc.content)
		rec, err := readPIDFile(path)
		if tc.err == "" {
			if err != nil || rec.PID != 12 {
				t.Errorf("%s: %+v, %v", tc.name, rec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", tc.name, err, path, tc.err)
		}
	}
	if _, err := readPIDFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestPIDFileNamesThisProcess: what `up` writes verifies as running for
// itself, and as stale once the PID names another process.
func TestPIDFileNamesThisProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), pidFileName)
	if err := writePIDFile(path); err != nil {
		t.Fatal(err)
	}
	st, err := checkUp(path, proc.Lookup)
	if err != nil || !st.running || st.rec.PID != os.Getpid() {
		t.Fatalf("checkUp of own pid file = %+v, %v", st, err)
	}
	reused := func(pid int) (proc.Identity, error) {
		id, err := proc.Lookup(pid)
		id.StartTime++
		return id, err
	}
	if st, err := checkUp(path, reused); err != nil || st.running || st.stale == "" {
		t.Errorf("checkUp with a reused pid = %+v, %v", st, err)
	}
}
