package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a pause process that first starts a
// child it never waits for: only pause's reaping can collect that zombie.
const helperEnv = "PORTSIDE_PAUSE_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "exit 0"}, &syscall.ProcAttr{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Println(pid)
		os.Exit(run(nil, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// startPause runs the helper and returns it, a channel closed when it has
// exited (its status then in *exitErr), and its child's PID.
func startPause(t *testing.T, exitErr *error) (*exec.Cmd, <-chan struct{}, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Closed once cmd has exited, its status in *exitErr: read by the
	// test and by the clean-up alike.
	done := make(chan struct{})
	go func() { *exitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("pause helper %d did not exit after SIGKILL", cmd.Process.Pid)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's PID: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child PID %q: %v", line, err)
	}
	return cmd, done, child
}

// gone reports whether pid no longer exists; a zombie still does (state Z).
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return errors.Is(err, os.ErrNotExist)
}

// TestReapsChildren: a child that exits is collected, not left a zombie in
// the pod's PID namespace.
func TestReapsChildren(t *testing.T) {
	var err error
	_, _, child := startPause(t, &err)
	deadline := time.Now().Add(10 * time.Second)
	for !gone(child) {
		if time.Now().After(deadline) {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
			t.Fatalf("child %d not reaped after 10 s: %s", child, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExitsZeroOnSignal: SIGTERM (the runtime's stop) and SIGINT end pause
// with status 0, so a stopped sandbox is not reported as failed.
func TestExitsZeroOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			var exitErr error
			cmd, done, _ := startPause(t, &exitErr)
			// Signal only once it has been running a moment, so the
			// handlers are in place (before them, SIGTERM kills it: 143).
			time.Sleep(200 * time.Millisecond)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
				if exitErr != nil {
					t.Fatalf("pause after %v: %v, want exit 0", sig, exitErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("pause still running 10 s after %v", sig)
			}
		})
	}
}

// TestKeepsRunning: without a signal pause does not exit.
func TestKeepsRunning(t *testing.T) {
	var exitErr error
	_, done, _ := startPause(t, &exitErr)
	select {
	case <-done:
		t.Fatalf("pause exited on its own: %v", exitErr)
	case <-time.After(500 * time.Millisecond):
	}
}
