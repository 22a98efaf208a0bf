package devenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/proc"
)

// The pid file names the running `up` by PID and by what tells it apart
// from a later process reusing that PID (start time and boot): `down`
// signals only the very process that wrote it.
//
//	12345
//	starttime 987654
//	boot_id 0f3c...
//	started 2026-11-30T20:05:27Z

const pidFileName = "portside-up.pid"

// pidRecord is a pid file's content. A legacy one (a bare PID, from
// Portside before identities) has no start time.
type pidRecord struct {
	proc.Identity
	legacy  bool
	written time.Time // the file's modification time
}

func writePIDFile(path string) error {
	self, err := proc.Lookup(os.Getpid())
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	data := fmt.Sprintf("%d\nstarttime %d\nboot_id %s\nstarted %s\n",
		self.PID, self.StartTime, self.BootID, self.Started.UTC().Format(time.RFC3339))
	// Written whole and renamed, so no reader sees half of it.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readPIDFile parses a pid file; a missing one is fs.ErrNotExist.
func readPIDFile(path string) (pidRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return pidRecord{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return pidRecord{}, err
	}
	garbage := func(why string) (pidRecord, error) {
		return pidRecord{}, fmt.Errorf("pid file %s is not a portside up pid file (%s)", path, why)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return garbage(fmt.Sprintf("first line %q is not a pid", lines[0]))
	}
	rec := pidRecord{Identity: proc.Identity{PID: pid}, legacy: len(lines) == 1, written: fi.ModTime()}
	if rec.legacy {
		return rec, nil
	}
	for _, line := range lines[1:] {
		key, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch key {
		case "starttime":
			rec.StartTime, err = strconv.ParseUint(value, 10, 64)
		case "boot_id":
			rec.BootID = value
		case "started":
			rec.Started, err = time.Parse(time.RFC3339, value)
		}
		if err != nil {
			return garbage(fmt.Sprintf("%s: %v", key, err))
		}
	}
	if rec.StartTime == 0 || rec.BootID == "" {
		return garbage("no starttime or boot_id")
	}
	return rec, nil
}

// verifyUp says whether rec still names the running `up` that wrote it,
// given what Lookup now says of its PID; if not, stale says why. An error
// means it cannot tell, so nothing may be signalled or removed.
func verifyUp(rec pidRecord, cur proc.Identity, lookupErr error) (running bool, stale string, err error) {
	was := fmt.Sprintf("pid %d is no longer portside up (started at %s)", rec.PID, rec.Started.Local().Format(time.DateTime))
	if rec.legacy || rec.Started.IsZero() {
		was = fmt.Sprintf("pid %d is no longer portside up (pid file written at %s)", rec.PID, rec.written.Local().Format(time.DateTime))
	}
	switch {
	case errors.Is(lookupErr, proc.ErrGone):
		return false, was + ": no such process", nil
	case lookupErr != nil:
		return false, "", fmt.Errorf("cannot tell whether pid %d is portside up: %w", rec.PID, lookupErr)
	case !rec.legacy && cur.BootID != rec.BootID:
		return false, was + ": the machine has restarted since", nil
	case !rec.legacy && cur.Same(rec.Identity):
		return true, "", nil
	case rec.legacy && looksLikeUp(cur.Args) && !cur.Started.After(rec.written.Add(2*time.Second)):
		// A bare PID is trusted only for a `portside up` running since
		// before the file was written (start times are to the second).
		return true, "", nil
	}
	return false, fmt.Sprintf("%s: it is now %q, started at %s", was, strings.Join(cur.Args, " "), cur.Started.Local().Format(time.DateTime)), nil
}

func looksLikeUp(args []string) bool {
	return len(args) > 1 && strings.Contains(filepath.Base(args[0]), "portside") && slices.Contains(args[1:], "up")
}

// upState is what a data directory's pid file says.
type upState struct {
	rec     pidRecord
	cur     proc.Identity // the running up, when running
	running bool
	stale   string // why the pid file names no running up
}

// checkUp reads the pid file at path and verifies the process it names; no
// pid file is neither running nor stale.
func checkUp(path string, lookup func(int) (proc.Identity, error)) (upState, error) {
	rec, err := readPIDFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return upState{}, nil
	}
	if err != nil {
		return upState{}, err
	}
	cur, lookupErr := lookup(rec.PID)
	running, stale, err := verifyUp(rec, cur, lookupErr)
	return upState{rec: rec, cur: cur, running: running, stale: stale}, err
}
