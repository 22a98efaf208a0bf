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
type Exposed struct {
	l      net.Listener
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
	logger := klog.FromContext(ctx).WithValues("at", l.Addr().String(), "target", target)
	logger.V(2).Info("Exposed to the VPC")
	e.wg.Add(1)
	go func() {
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
	}()
	return e, nil
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
	e.mu.Lock()
	e.closed = true
	for c := range e.conns {
		_ = c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
	return err
}
