package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// flakyListener fails AcceptTCP with EMFILE while failing is set.
type flakyListener struct {
	*net.TCPListener
	failing  atomic.Bool
	failures atomic.Int64
}

func (f *flakyListener) AcceptTCP() (*net.TCPConn, error) {
	if f.failing.Load() {
		f.failures.Add(1)
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.TCPListener.AcceptTCP()
}

// TestListenerSurvivesAcceptErrors: EMFILE from accept makes the listener
// back off and report not serving, not stop; it serves again afterwards.
func TestListenerSurvivesAcceptErrors(t *testing.T) {
	var flaky atomic.Pointer[flakyListener]
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, listenTCP: func(a *net.TCPAddr) (tcpAcceptor, error) {
		ln, err := net.ListenTCP("tcp", a)
		if err != nil {
			return nil, err
		}
		f := &flakyListener{TCPListener: ln}
		f.failing.Store(true)
		flaky.Store(f)
		return f, nil
	}})
	t.Cleanup(p.Close)
	a := startBackend(t, "a", randomLoopback(), 0)
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{Name: "lb-emfile", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}}}); err != nil {
		t.Fatal(err)
	}
	f := flaky.Load()
	waitFor(t, 10*time.Second, "accept retried after EMFILE", func() bool { return f.failures.Load() >= 3 })
	h, _ := p.Health("lb-emfile")
	if len(h.Listeners) != 1 || h.Listeners[0].Serving || h.Serving || h.Listeners[0].AcceptErrors < 3 ||
		!strings.Contains(h.Listeners[0].LastError, "too many open files") {
		t.Fatalf("health while accept fails = %+v, want listener not serving with the EMFILE error", h)
	}

	f.failing.Store(false)
	if name, err := askWithin(netip.AddrPortFrom(vip, uint16(port)), 15*time.Second); err != nil || name != "a" {
		t.Fatalf("after accept errors stopped: %q %v, want served by a", name, err)
	}
	waitFor(t, 10*time.Second, "listener serving again", func() bool {
		h, _ := p.Health("lb-emfile")
		return h.Serving && len(h.Listeners) == 1 && h.Listeners[0].Serving
	})
}

// askWithin is ask with a longer deadline, for a listener that may be
// backing off (up to 1s) when the client connects.
func askWithin(target netip.AddrPort, d time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", target.String(), d)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return strings.TrimSpace(string(buf[:n])), err
}

func TestAcceptLoopEnds(t *testing.T) {
	opErr := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	for _, tc := range []struct {
		err  error
		ends bool
	}{
		{opErr(syscall.EMFILE), false},
		{opErr(syscall.ENFILE), false},
		{opErr(syscall.ENOBUFS), false},
		{opErr(syscall.ENOMEM), false},
		{opErr(syscall.ECONNABORTED), false},
		{opErr(os.ErrDeadlineExceeded), false},
		{errors.New("something else"), false},
		{&net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}, true},
		{fmt.Errorf("read: %w", net.ErrClosed), true},
	} {
		if got := acceptLoopEnds(tc.err); got != tc.ends {
			t.Errorf("acceptLoopEnds(%v) = %v, want %v", tc.err, got, tc.ends)
		}
	}
}

func TestAcceptBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct{ prev, want time.Duration }{
		{0, 5 * ms}, {5 * ms, 10 * ms}, {10 * ms, 20 * ms}, {320 * ms, 640 * ms},
		{640 * ms, time.Second}, {time.Second, time.Second},
	} {
		if got := acceptBackoff(tc.prev); got != tc.want {
			t.Errorf("acceptBackoff(%v) = %v, want %v", tc.prev, got, tc.want)
		}
	}
}
