package devenv

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/portside-io/portside/internal/proc"
)

// Restart backoff of supervised children, as a kubelet restarts a crashed
// container: doubling from 1 s to 30 s, back to 1 s after a minute up.
const (
	restartBackoffMin  = time.Second
	restartBackoffMax  = 30 * time.Second
	restartResetUptime = time.Minute
	// Every crashLoopReport-th restart in a row prints the end of the log.
	crashLoopReport = 3
)

// supervisor keeps one child running: when it dies on its own it is
// started again with backoff, and `up` says so and why. Stopping it stops
// the current child and the restarts.
type supervisor struct {
	// part names it in `up`'s output; what on the stack ("stopping ...").
	part, what string
	grace      time.Duration
	start      func() (*proc.Process, error)
	p          *progress

	mu       sync.Mutex
	cur      *proc.Process
	stopping bool
	stopped  chan struct{}
	done     chan struct{}
}

// supervise takes over first (already started and ready) and restarts it
// with start whenever it dies; push the result's stop on the stack.
func supervise(p *progress, part, what string, first *proc.Process, grace time.Duration, start func() (*proc.Process, error)) *supervisor {
	sv := &supervisor{part: part, what: what, grace: grace, start: start, p: p, cur: first, stopped: make(chan struct{}), done: make(chan struct{})}
	go sv.run()
	return sv
}

// current is the running child (or the last one, while a restart waits).
func (sv *supervisor) current() *proc.Process {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.cur
}

func (sv *supervisor) run() {
	defer close(sv.done)
	backoff, inARow := restartBackoffMin, 0
	started := time.Now()
	for {
		cur := sv.current()
		select {
		case <-sv.stopped:
			return
		case <-cur.Done():
		}
		// proc has killed the rest of its group already, before reaping
		// it, while the group ID was surely still its own.
		if time.Since(started) > restartResetUptime {
			backoff, inARow = restartBackoffMin, 0
		}
		inARow++
		sv.p.step(sv.part, "%s pid %d exited on its own (%v) after %s; restarting in %s (restart %d in a row)",
			sv.what, cur.PID(), cur.ExitErr(), time.Since(started).Round(100*time.Millisecond), backoff, inARow)
		if inARow%crashLoopReport == 0 {
			sv.p.step(sv.part, "%s keeps crashing; last lines of %s:\n    %s", sv.what, cur.LogPath,
				strings.ReplaceAll(strings.TrimSpace(cur.LogTail(8)), "\n", "\n    "))
		}
		next, ok := sv.restart(&backoff)
		if !ok {
			return
		}
		sv.cur, started = next, time.Now()
		sv.mu.Unlock()
		sv.p.step(sv.part, "%s restarted (pid %d)", sv.what, next.PID())
	}
}

// restart waits out the backoff and starts a new child, trying again with
// a longer backoff while starting fails. It returns with sv.mu held and
// ok, or ok=false when the supervisor was stopped meanwhile.
func (sv *supervisor) restart(backoff *time.Duration) (*proc.Process, bool) {
	for {
		select {
		case <-sv.stopped:
			return nil, false
		case <-time.After(*backoff):
		}
		*backoff = min(2**backoff, restartBackoffMax)
		next, err := sv.start()
		if err != nil {
			sv.p.step(sv.part, "%s could not be restarted (%v); trying again in %s", sv.what, err, *backoff)
			continue
		}
		sv.mu.Lock()
		if sv.stopping {
			sv.mu.Unlock()
			next.Stop(sv.grace)
			return nil, false
		}
		return next, true
	}
}

// stop ends the restarts and stops the current child.
func (sv *supervisor) stop() {
	sv.mu.Lock()
	if sv.stopping {
		sv.mu.Unlock()
		return
	}
	sv.stopping = true
	close(sv.stopped)
	cur := sv.cur
	sv.mu.Unlock()
	cur.Stop(sv.grace)
	<-sv.done
}

// pushSupervised puts a supervised child on the stack: its death is no
// longer the environment's end, only its restart.
func (s *stack) pushSupervised(sv *supervisor) {
	describe := func() string { return fmt.Sprintf("%s (pid %d)", sv.what, sv.current().PID()) }
	s.parts = append(s.parts, stopper{what: describe(), describe: describe, stop: sv.stop})
}
