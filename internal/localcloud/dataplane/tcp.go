package dataplane

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// tcpListener accepts on VIP:port and splices each connection to a backend.
type tcpListener struct {
	b           *balancer
	ln          *net.TCPListener
	backendPort atomic.Int64
	done        chan struct{}
	closeOnce   sync.Once
}

func listenTCP(b *balancer, addr netip.AddrPort, backendPort int) (*tcpListener, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	l := &tcpListener{b: b, ln: ln, done: make(chan struct{})}
	l.backendPort.Store(int64(backendPort))
	go l.serve()
	return l, nil
}

func (l *tcpListener) setBackendPort(p int) { l.backendPort.Store(int64(p)) }

func (l *tcpListener) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		_ = l.ln.Close()
	})
}

func (l *tcpListener) serve() {
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.b.logger().Error(err, "Accept failed", "listener", l.ln.Addr())
			return
		}
		go l.handle(c)
	}
}

func (l *tcpListener) handle(client *net.TCPConn) {
	clientIP := client.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	if !l.b.allowed(clientIP) {
		// Refuse outright (RST), as a cloud firewall would.
		_ = client.SetLinger(0)
		_ = client.Close()
		return
	}
	port := int(l.backendPort.Load())
	var tried map[*backend]bool
	for attempt := 0; attempt < 3; attempt++ {
		be := l.b.pick(clientIP, tried)
		if be == nil {
			break
		}
		c, err := net.DialTimeout("tcp", l.b.backendAddr(be, port), l.b.opts.DialTimeout)
		if err != nil {
			if tried == nil {
				tried = map[*backend]bool{}
			}
			tried[be] = true
			continue
		}
		splice(be, client, c.(*net.TCPConn))
		return
	}
	_ = client.SetLinger(0)
	_ = client.Close()
}

// splice copies both ways until both sides are done; on Linux io.Copy
// between TCP connections uses splice(2), so bytes never enter user space.
func splice(be *backend, client, server *net.TCPConn) {
	be.track(client)
	defer be.untrack(client)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(server, client)
		_ = server.CloseWrite()
	}()
	_, _ = io.Copy(client, server)
	_ = client.CloseWrite()
	wg.Wait()
	_ = client.Close()
	_ = server.Close()
}
