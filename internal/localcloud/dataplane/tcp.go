package dataplane

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// tcpAcceptor is the part of *net.TCPListener the proxy uses.
type tcpAcceptor interface {
	AcceptTCP() (*net.TCPConn, error)
	Close() error
	Addr() net.Addr
}

// tcpListener accepts on VIP:port and splices each connection to a backend.
type tcpListener struct {
	b         *balancer
	ln        tcpAcceptor
	route     atomic.Pointer[route]
	active    atomic.Int64
	state     serveState
	done      chan struct{}
	closeOnce sync.Once
	// idle hands accepted connections to workers waiting for one.
	idle chan job
	// vip4: the listener's VIP is IPv4 (pick prefers backends of its family).
	vip4 bool
}

// workerIdle is how long a connection's goroutine waits for the next one
// before it exits.
const workerIdle = 10 * time.Second

// route is a backend port and the connections proxied to it, so that a
// port change can drain them.
type route struct {
	port  int
	conns connSet
}

func listenTCP(b *balancer, addr netip.AddrPort, backendPort int) (*tcpListener, error) {
	ln, err := b.opts.listenTCP(net.TCPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	l := &tcpListener{b: b, ln: ln, done: make(chan struct{}), idle: make(chan job), vip4: addr.Addr().Unmap().Is4()}
	l.state.proto, l.state.addr = api.ProtocolTCP, addr.String()
	l.route.Store(&route{port: backendPort})
	go l.serve()
	return l, nil
}

// setBackendPort drains the connections to the old port as a removed
// backend's: they may go on for DrainTimeout. Called with b.mu held.
func (l *tcpListener) setBackendPort(p int) {
	old := l.route.Load()
	if old.port == p {
		return
	}
	l.route.Store(&route{port: p})
	time.AfterFunc(l.b.opts.DrainTimeout, func() { old.conns.closeAll() })
}

func (l *tcpListener) status() api.ListenerHealth { return l.state.status(l.active.Load()) }

// closeConns closes the connections through the current port (those to
// older ports are draining or tracked by their backends).
func (l *tcpListener) closeConns() { l.route.Load().conns.closeAll() }

func (l *tcpListener) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		_ = l.ln.Close()
	})
}

// serve accepts until the listener is closed; other errors (EMFILE,
// ECONNABORTED, ...) only make it back off, as net/http's Server does.
func (l *tcpListener) serve() {
	var wait time.Duration
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			if acceptLoopEnds(err) {
				return
			}
			wait = acceptBackoff(wait)
			l.state.failed(l.b.logger(), err, wait)
			if !sleepOrDone(wait, l.done) {
				return
			}
			continue
		}
		wait = 0
		l.state.ok(l.b.logger())
		if !acquireBoth(&l.b.conns, l.b.globalConns) {
			l.state.rejected.Add(1)
			_ = c.SetLinger(0)
			_ = c.Close()
			continue
		}
		l.run(job{client: c})
	}
}

// job is a worker's task: a new client connection to proxy, or (server
// set) the client → server half of a proxied one.
type job struct {
	client, server *net.TCPConn
	pair           *halves
}

// halves tracks a proxied connection's two directions: the first to end
// half-closes its destination (EOF travels on), the second need not, as
// both are closed right after (a shutdown(2) less per connection).
type halves struct {
	running atomic.Int32
	up      sync.WaitGroup // client → server is done
}

// finish ends one direction.
func (h *halves) finish(dst *net.TCPConn) {
	if h.running.Add(-1) > 0 {
		_ = dst.CloseWrite()
	}
}

// run hands j to an idle worker, or starts one.
func (l *tcpListener) run(j job) {
	select {
	case l.idle <- j:
	default:
		go l.worker(j)
	}
}

// worker runs j, then the jobs it is handed while idle. Reusing goroutines
// keeps the stack they grew while dialing and splicing: a fresh goroutine
// per connection and direction spent ~10% of the proxy's CPU in
// runtime.newstack/copystack.
func (l *tcpListener) worker(j job) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		if j.server == nil {
			l.handle(j.client)
		} else {
			_, _ = io.Copy(j.server, j.client)
			j.pair.finish(j.server)
			j.pair.up.Done()
		}
		j = job{} // do not keep the connections while idle
		idle.Reset(workerIdle)
		select {
		case j = <-l.idle:
		case <-idle.C:
			return
		case <-l.done:
			return
		}
	}
}

func (l *tcpListener) handle(client *net.TCPConn) {
	l.active.Add(1)
	defer l.active.Add(-1)
	defer releaseBoth(&l.b.conns, l.b.globalConns)
	clientIP := client.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	if !l.b.allowed(clientIP) {
		// Refuse outright (RST), as a cloud firewall would.
		_ = client.SetLinger(0)
		_ = client.Close()
		return
	}
	r := l.route.Load()
	var tried map[*backend]bool
	for attempt := 0; attempt < 3; attempt++ {
		be := l.b.pick(l.vip4, clientIP, tried)
		if be == nil {
			break
		}
		// Not Dialer.DialTCP: its zero local address becomes a bind() to
		// 0.0.0.0:0, which takes an ephemeral port for good.
		c, err := l.b.opts.dialer.DialContext(context.Background(), "tcp", be.dialAddr(r.port))
		if err != nil {
			if tried == nil {
				tried = map[*backend]bool{}
			}
			tried[be] = true
			continue
		}
		l.proxy(be, r, client, c.(*net.TCPConn))
		return
	}
	_ = client.SetLinger(0)
	_ = client.Close()
}

// proxy splices client and server while tracking them with the backend
// and the route, which close them on drain or removal.
func (l *tcpListener) proxy(be *backend, r *route, client, server *net.TCPConn) {
	if !be.track(client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer be.untrack(client)
	if !r.conns.add(client, server) { // drained while dialing
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer r.conns.remove(client)
	l.splice(client, server)
}

// splice copies both ways until both sides are done, client → server in
// another worker; on Linux io.Copy between TCP connections uses splice(2)
// (verified with strace, both ways), so bytes never enter user space.
func (l *tcpListener) splice(client, server *net.TCPConn) {
	pair := &halves{}
	pair.running.Store(2)
	pair.up.Add(1)
	l.run(job{client: client, server: server, pair: pair})
	_, _ = io.Copy(client, server)
	pair.finish(client)
	pair.up.Wait()
	_ = client.Close()
	_ = server.Close()
}
