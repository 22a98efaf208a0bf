package dataplane

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// limiter bounds a count without a lock: add, then undo if over max.
type limiter struct {
	n   atomic.Int64
	max int64 // < 0: no limit
}

func (l *limiter) acquire() bool {
	if l.n.Add(1) > l.max && l.max >= 0 {
		l.n.Add(-1)
		return false
	}
	return true
}

func (l *limiter) release() { l.n.Add(-1) }

// acquireBoth takes one from a load balancer's limiter and the global one,
// or from neither.
func acquireBoth(lb, global *limiter) bool {
	if !lb.acquire() {
		return false
	}
	if !global.acquire() {
		lb.release()
		return false
	}
	return true
}

func releaseBoth(lb, global *limiter) {
	lb.release()
	global.release()
}

// connSet holds proxied connections (client → server) so they can be
// closed together; once closed it refuses new ones, so a connection still
// dialing when its load balancer goes is not left behind.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]net.Conn
	closed bool
}

func (s *connSet) add(client, server net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]net.Conn{}
	}
	s.conns[client] = server
	return true
}

// remove reports whether client was still in the set.
func (s *connSet) remove(client net.Conn) bool {
	s.mu.Lock()
	_, ok := s.conns[client]
	delete(s.conns, client)
	s.mu.Unlock()
	return ok
}

// closeAll closes both sides of every connection and returns how many.
func (s *connSet) closeAll() int {
	s.mu.Lock()
	conns := s.conns
	s.conns, s.closed = nil, true
	s.mu.Unlock()
	for c, srv := range conns {
		_ = c.Close()
		_ = srv.Close()
	}
	return len(conns)
}

// acceptLoopEnds reports whether an accept (or UDP read) error ends the
// loop: only a closed listener does; EMFILE and the like pass.
func acceptLoopEnds(err error) bool { return errors.Is(err, net.ErrClosed) }

// acceptBackoff is the wait after an accept error, as net/http's Server:
// 5ms, doubling up to 1s.
func acceptBackoff(prev time.Duration) time.Duration {
	if prev <= 0 {
		return 5 * time.Millisecond
	}
	if prev *= 2; prev > time.Second {
		return time.Second
	}
	return prev
}

// serveState is what a listener reports in its health.
type serveState struct {
	proto, addr string
	failing     atomic.Bool
	errors      atomic.Int64
	rejected    atomic.Int64
	lastErr     atomic.Pointer[string]
}

// failed records an accept error; only the first of a run is logged.
func (s *serveState) failed(logger klog.Logger, err error, wait time.Duration) {
	s.errors.Add(1)
	msg := err.Error()
	s.lastErr.Store(&msg)
	if !s.failing.Swap(true) {
		logger.Error(err, "Listener not serving, backing off", "listener", s.addr, "wait", wait)
	}
}

// ok marks the listener serving after a successful accept.
func (s *serveState) ok(logger klog.Logger) {
	if s.failing.Load() && s.failing.Swap(false) {
		logger.Info("Listener serving again", "listener", s.addr, "acceptErrors", s.errors.Load())
	}
}

func (s *serveState) status(active int64) api.ListenerHealth {
	h := api.ListenerHealth{Protocol: s.proto, Address: s.addr, Serving: !s.failing.Load(),
		AcceptErrors: s.errors.Load(), Active: active, Rejected: s.rejected.Load()}
	if msg := s.lastErr.Load(); msg != nil {
		h.LastError = *msg
	}
	return h
}

// sleepOrDone waits d unless done closes first; it reports whether to go on.
func sleepOrDone(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
