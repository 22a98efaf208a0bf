package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStopKillsWholeGroup(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	// The shell ignores SIGTERM and starts a grandchild; Stop must still end both.
	p, err := Start("sh", "/bin/sh", []string{"-c", "trap '' TERM; sleep 300 & echo started; wait"}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for TailFile(log, 1) != "started" {
		if time.Now().After(deadline) {
			t.Fatalf("child did not start; log: %q", TailFile(log, 5))
		}
		time.Sleep(10 * time.Millisecond)
	}
	pgid := p.PID()
	start := time.Now()
	p.Stop(200 * time.Millisecond)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Stop took %v", took)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("process not done after Stop")
	}
	// No member of the group may survive.
	deadline = time.Now().Add(2 * time.Second)
	for live := liveGroupMembers(t, pgid); len(live) > 0; live = liveGroupMembers(t, pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %v", pgid, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Stop(time.Second) // idempotent
}

func TestExitErrAndTail(t *testing.T) {
	log := filepath.Join(t.TempDir(), "x.log")
	p, err := Start("false", "/bin/sh", []string{"-c", "echo one; echo two; exit 3"}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.ExitErr() == nil {
		t.Fatal("want exit error")
	}
	if got := p.LogTail(1); got != "two" {
		t.Fatalf("tail = %q, want %q", got, "two")
	}
	if _, err := Start("missing", "/nonexistent/binary", nil, nil, filepath.Join(t.TempDir(), "m.log")); err == nil {
		t.Fatal("want error starting a missing binary")
	}
}

// liveGroupMembers lists processes of group pgid that are not zombies
// (a zombie waits for its reaper, but holds no resources).
func liveGroupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid pgrp ...
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			live = append(live, pid)
		}
	}
	return live
}
