// Package proc starts and stops the helper processes Portside runs (etcd,
// kube-apiserver, the local cloud, ...). Every process gets its own process
// group and dies with its parent, so a crashed test or a Ctrl-C never leaves
// an orphan holding a port.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a started child process whose output goes to a log file.
type Process struct {
	Name    string
	LogPath string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	waitErr error
	stop    sync.Once
}

// Start runs path with args, appending stdout and stderr to logPath.
// env entries are added to the current environment.
func Start(name, path string, args []string, env []string, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// The child is killed when the parent dies, even by SIGKILL.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, path, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr reports how the process ended; valid once Done is closed.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return errors.New("exited with status 0")
		}
		return p.waitErr
	default:
		return nil
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL. It is safe to call more than once and after the process exited.
func (p *Process) Stop(grace time.Duration) {
	p.stop.Do(func() {
		pgid := -p.cmd.Process.Pid
		select {
		case <-p.done:
			// The leader is gone; still reap anything left in its group.
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			return
		default:
		}
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			<-p.done
		}
		_ = syscall.Kill(pgid, syscall.SIGKILL)
	})
}

// Kill sends SIGKILL to the process group at once (a crash, for tests of
// durability) and waits for the process to exit.
func (p *Process) Kill() {
	p.stop.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// LogTail returns up to n last lines of the process log, for error messages.
func (p *Process) LogTail(n int) string { return TailFile(p.LogPath, n) }

// TailFile returns up to n last lines of a file.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
