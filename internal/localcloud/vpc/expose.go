package vpc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Exposed is a host service served to the VPC at the gateway: a listener
// in the router namespace whose connections are relayed to a loopback
// address on the host. The service itself never listens beyond loopback.
// In a dual-stack VPC it listens at the IPv6 gateway too, on the same
// port: an IPv6-only cluster's pods reach kube-apiserver there.
type Exposed struct {
	l      net.Listener
	l6     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Expose serves target (host:port on the host's loopback) at the gateway's
// port (0 picks a free one; see Addr).
func (nw *Network) Expose(ctx context.Context, port int, target string) (*Exposed, error) {
	l, err := ListenIn(nw.RouterNetns(), "tcp", net.JoinHostPort(nw.gw.String(), strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	e := &Exposed{l: l, target: target, conns: map[net.Conn]struct{}{}}
	if nw.gw6.IsValid() {
		at := l.Addr().(*net.TCPAddr).Port
		if e.l6, err = ListenIn(nw.RouterNetns(), "tcp", net.JoinHostPort(nw.gw6.String(), strconv.Itoa(at))); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	logger := klog.FromContext(ctx).WithValues("at", l.Addr().String(), "target", target)
	logger.V(2).Info("Exposed to the VPC", "at6", e.Addr6())
	for _, ln := range []net.Listener{e.l, e.l6} {
		if ln != nil {
			e.wg.Add(1)
			go e.serve(logger, ln)
		}
	}
	return e, nil
}

func (e *Exposed) serve(logger klog.Logger, l net.Listener) {
	defer e.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				logger.Error(err, "Accept failed")
			}
			return
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.relay(c)
		}()
	}
}

// Addr6 is the IPv6 gateway's address and port (invalid: an IPv4 VPC).
func (e *Exposed) Addr6() netip.AddrPort {
	if e.l6 == nil {
		return netip.AddrPort{}
	}
	return e.l6.Addr().(*net.TCPAddr).AddrPort()
}

// Addr is the gateway address and port the VPC reaches the service at.
func (e *Exposed) Addr() netip.AddrPort {
	return e.l.Addr().(*net.TCPAddr).AddrPort()
}

func (e *Exposed) track(c net.Conn, add bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if add {
		if e.closed {
			return false
		}
		e.conns[c] = struct{}{}
	} else {
		delete(e.conns, c)
	}
	return true
}

func (e *Exposed) relay(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", e.target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if !e.track(c, true) {
		return
	}
	defer e.track(c, false)
	if !e.track(up, true) {
		return
	}
	defer e.track(up, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if t, ok := dst.(*net.TCPConn); ok {
			_ = t.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// Close stops serving and ends every relayed connection.
func (e *Exposed) Close() error {
	err := e.l.Close()
	if e.l6 != nil {
		_ = e.l6.Close()
	}
	e.mu.Lock()
	e.closed = true
	for c := range e.conns {
		_ = c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
	return err
}
