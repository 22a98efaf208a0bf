package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitOnSecondSignal runs the watch in a child (this test binary,
// re-executed): the first SIGTERM leaves it running (the clean-up goes
// on), the second ends it with 130 and the message.
func TestExitOnSecondSignal(t *testing.T) {
	if os.Getenv("PORTSIDE_TEST_SECOND_SIGNAL_CHILD") == "1" {
		stop := exitOnSecondSignal(os.Stdout, "run the clean-up command")
		defer stop()
		fmt.Println("watching")
		time.Sleep(time.Minute) // killed by the second signal
		os.Exit(3)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExitOnSecondSignal$")
	cmd.Env = append(os.Environ(), "PORTSIDE_TEST_SECOND_SIGNAL_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "watching" {
		t.Fatalf("child's first line %q", lines.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The first signal alone must not end it.
	exited := make(chan error, 1)
	var rest strings.Builder
	go func() {
		for lines.Scan() {
			rest.WriteString(lines.Text() + "\n")
		}
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		t.Fatalf("the child exited on the first signal: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("the child ended with %v, want exit status 130", err)
		}
		if !strings.Contains(rest.String(), "second signal") || !strings.Contains(rest.String(), "run the clean-up command") {
			t.Errorf("the child's message %q", rest.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not exit on the second signal")
	}
}
