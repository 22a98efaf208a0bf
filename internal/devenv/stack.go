package devenv

import (
	"fmt"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/proc"
)

// stack holds the parts started so far, to stop them in reverse order:
// after a failed start, on Ctrl-C, on `portside down` and after --once.
type stack struct {
	p     *progress
	parts []stopper
	// claims are held past stopAll (hold, releaseClaims).
	claims []*claim
}

type stopper struct {
	what string
	// describe, if set, names the part at stop time (a restarted child has
	// a new pid).
	describe func() string
	stop     func()
	// done, if set, is closed when the part dies on its own.
	done <-chan struct{}
}

func (s *stack) push(what string, stop func(), done <-chan struct{}) {
	s.parts = append(s.parts, stopper{what: what, stop: stop, done: done})
}

// pushProcess registers a child process, stopped with SIGTERM then SIGKILL.
func (s *stack) pushProcess(part string, p *proc.Process, grace time.Duration) {
	s.push(fmt.Sprintf("%s (pid %d)", part, p.PID()), func() { p.Stop(grace) }, p.Done())
}

// pop forgets the last part without stopping it (someone else will).
func (s *stack) pop() { s.parts = s.parts[:len(s.parts)-1] }

func (s *stack) stopAll() {
	for i := len(s.parts) - 1; i >= 0; i-- {
		what := s.parts[i].what
		if s.parts[i].describe != nil {
			what = s.parts[i].describe()
		}
		s.p.step("shutdown", "stopping %s", what)
		s.parts[i].stop()
	}
	s.parts = nil
}

// exited reports the first part that dies on its own while the environment runs.
func (s *stack) exited() <-chan string {
	out := make(chan string, len(s.parts))
	for _, part := range s.parts {
		if part.done != nil {
			go func() { <-part.done; out <- part.what }()
		}
	}
	return out
}

// processError names a child that failed to start, its log, and the log's
// last lines on one line, since the cause is usually there.
func processError(cause error, p *proc.Process) error {
	tail := strings.Join(strings.Fields(strings.ReplaceAll(p.LogTail(4), "\n", " | ")), " ")
	return fmt.Errorf("%w (log %s; last lines: %s)", cause, p.LogPath, tail)
}
