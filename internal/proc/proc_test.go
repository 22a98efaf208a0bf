package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/testskip"
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

// TestStopSparesReusedGroupID: once a child has exited and been reaped,
// its PID (its group ID) may name another process group; stopping the
// child later must not signal that group. The PID is reused on purpose
// through ns_last_pid, which needs root.
func TestStopSparesReusedGroupID(t *testing.T) {
	p, err := Start("short", "/bin/sh", []string{"-c", "exit 0"}, nil, filepath.Join(t.TempDir(), "short.log"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	stranger := reusePID(t, p.PID())
	p.Stop(time.Second)
	p.Kill()
	select {
	case <-stranger:
		t.Fatalf("Stop of an exited child killed process group %d, which belongs to another process now", p.PID())
	case <-time.After(300 * time.Millisecond):
	}
}

// reusePID starts `sleep 60` as a process group leader with PID pid and
// returns a channel closed when it exits; when it cannot, the test skips
// (fails under CI: testskip).
func reusePID(t *testing.T, pid int) <-chan struct{} {
	t.Helper()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			testskip.Unavailable(t, "cannot choose the next PID (needs root to write /proc/sys/kernel/ns_last_pid): %v", err)
		}
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		if cmd.Process.Pid == pid {
			return exited
		}
		_ = cmd.Process.Kill() // another process took the PID first
	}
	testskip.Unavailable(t, "could not get PID %d again in 50 tries (other processes took it)", pid)
	return nil
}

// TestExitKillsRestOfGroup: when the leader exits on its own, what it left
// in its group is killed while the group ID is surely still its own.
func TestExitKillsRestOfGroup(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p, err := Start("sh", "/bin/sh", []string{"-c", "sleep 300 & echo started"}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	defer func() {
		for _, pid := range liveGroupMembers(t, p.PID()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for live := liveGroupMembers(t, p.PID()); len(live) > 0; live = liveGroupMembers(t, p.PID()) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %v after its leader exited", p.PID(), live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLookup(t *testing.T) {
	self, err := Lookup(os.Getpid())
	if err != nil || self.StartTime == 0 || self.BootID == "" || len(self.Args) == 0 {
		t.Fatalf("Lookup(self) = %+v, %v", self, err)
	}
	if d := time.Since(self.Started); d < 0 || d > time.Hour {
		t.Errorf("started %v ago", d)
	}
	again, _ := Lookup(os.Getpid())
	if !self.Same(again) {
		t.Errorf("%+v is not the same as %+v", self, again)
	}
	p, err := Start("short", "/bin/sh", []string{"-c", "exit 0"}, nil, filepath.Join(t.TempDir(), "short.log"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if _, err := Lookup(p.PID()); !errors.Is(err, ErrGone) {
		t.Errorf("Lookup of a reaped child: %v, want ErrGone", err)
	}
}

func TestUsageOfThisProcess(t *testing.T) {
	// Burn CPU until the 10 ms ticks show some: a fixed amount of work
	// can finish inside one tick (and read 0) on a fast or idle machine.
	x, deadline := 0, time.Now().Add(5*time.Second)
	for CPUSeconds(os.Getpid()) <= 0 && time.Now().Before(deadline) {
		for i := range 5_000_000 {
			x += i
		}
	}
	_ = x
	if c := CPUSeconds(os.Getpid()); c <= 0 {
		t.Errorf("CPUSeconds of this process = %v after 5 s of work, want > 0", c)
	}
	if r := RSS(os.Getpid()); r <= 1<<20 {
		t.Errorf("RSS of this process = %d bytes, want over 1 MiB", r)
	}
	if p, r := PSS(os.Getpid()), RSS(os.Getpid()); p <= 0 || p > r {
		t.Errorf("PSS of this process = %d bytes, want > 0 and at most its RSS %d", p, r)
	}
	if CPUSeconds(-1) != 0 || RSS(-1) != 0 || PSS(-1) != 0 {
		t.Error("a process that does not exist has usage")
	}
}
