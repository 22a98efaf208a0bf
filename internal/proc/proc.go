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
	"unsafe"
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

	// mu orders group signals with the reaping of the leader: once it is
	// reaped its PID, which is the group ID, may be reused by anyone.
	mu     sync.Mutex
	reaped bool
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
		// While the exited leader is an unreaped zombie its PID cannot be
		// reused, so the group is still surely ours: end what is left of
		// it, then reap.
		waitExited(cmd.Process.Pid)
		p.mu.Lock()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		p.waitErr = cmd.Wait()
		p.reaped = true
		p.mu.Unlock()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// waitExited blocks until pid has exited, without reaping it.
func waitExited(pid int) {
	const pPID = 1
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}

// signalGroup signals the process group unless its leader was reaped (then
// the group is empty, as the leader's exit ended it, and its ID may belong
// to another process now).
func (p *Process) signalGroup(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
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
// SIGKILL; when the leader exits the rest of its group is killed. It is safe to call more than once and after the process exited.
func (p *Process) Stop(grace time.Duration) {
	p.stop.Do(func() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			p.signalGroup(syscall.SIGKILL)
			<-p.done
		}
	})
}

// Kill sends SIGKILL to the process group at once (a crash, for tests of
// durability) and waits for the process to exit.
func (p *Process) Kill() {
	p.stop.Do(func() {
		p.signalGroup(syscall.SIGKILL)
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
