package server

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy/link"
)

// Write-through to HTTP-CONNECT clients. A portside-link/2 connection's
// bytes from the agent went from the link's reader to the connection's
// pump goroutine, which wrote them to the client: a goroutine woken per
// payload, most of the server's share of a round trip. The link's reader
// now writes to the client itself while nothing is queued for it
// (link.TryWriter), as the agent does towards destinations, through a
// tryConn: the client's socket under its TLS, whose writes can be made
// not to wait. A payload is written whole or not at all, so a TLS record
// is never cut: what the socket does not take goes to a goroutine of its
// own that writes it before anything else (one payload at most per
// connection), and the reader moves on. A client that stops reading
// still stalls only its own connection.

// tryListener hands out tryConns.
type tryListener struct{ net.Listener }

func (l tryListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c, nil
	}
	tc := &tryConn{Conn: c, rc: rc}
	tc.cond.L = &tc.mu
	return tc, nil
}

// tryConn is a client's connection whose writes can be made not to wait.
type tryConn struct {
	net.Conn
	rc syscall.RawConn

	mu   sync.Mutex
	cond sync.Cond
	// try: writes in progress must not wait; what the socket does not
	// take is stashed for the flusher.
	try bool
	// flushing: a goroutine writes the stash; other writes wait for it.
	flushing bool
	// active counts writes that may wait for the socket; TryWrite is
	// refused meanwhile, so the link's reader never queues behind one.
	active int
	stash  []byte
	err    error // the flusher's failure, every later write's
}

func (c *tryConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.try {
		defer c.mu.Unlock()
		n := len(b)
		if len(c.stash) == 0 {
			b = b[c.writeNow(b):]
		}
		c.stash = append(c.stash, b...)
		return n, nil
	}
	for c.flushing {
		c.cond.Wait()
	}
	if err := c.err; err != nil {
		c.mu.Unlock()
		return 0, err
	}
	c.active++
	c.mu.Unlock()
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.active--
	c.mu.Unlock()
	return n, err
}

// writeNow is one write(2) on the non-blocking socket: what it took.
func (c *tryConn) writeNow(b []byte) int {
	n := 0
	_ = c.rc.Write(func(fd uintptr) bool {
		if w, err := syscall.Write(int(fd), b); err == nil {
			n = w
		}
		return true // never wait for the socket to be writable
	})
	return n
}

// tryWrite writes p to dst (c itself, or the TLS connection over it)
// without waiting for the socket, unless another write is in progress or
// being finished: then it does nothing and says so.
func (c *tryConn) tryWrite(dst io.Writer, p []byte) bool {
	c.mu.Lock()
	if c.try || c.flushing || c.active > 0 || c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.try = true
	c.mu.Unlock()
	_, err := dst.Write(p)
	c.mu.Lock()
	c.try = false
	if len(c.stash) > 0 {
		c.flushing = true
		go c.flush()
	}
	c.mu.Unlock()
	return err == nil
}

// flush writes the stash, waiting for the socket, before any other write.
func (c *tryConn) flush() {
	c.mu.Lock()
	b := c.stash
	c.mu.Unlock()
	_, err := c.Conn.Write(b) // a closed connection ends it
	c.mu.Lock()
	c.stash = c.stash[:0]
	if cap(c.stash) > 64<<10 {
		c.stash = nil
	}
	c.flushing = false
	if err != nil {
		c.err = err
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// tryConnOf is the tryConn under a hijacked client connection, if any.
func tryConnOf(nc net.Conn) *tryConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, _ := nc.(*tryConn)
	return c
}

// httpLinkWriter is where a portside-link/2 stream's bytes go on their
// way to an HTTP-CONNECT client: link.Stream.WriteTo's destination, and
// its reader's while nothing is queued (TryWrite). werr is the client's
// failure, told apart from the link's.
type httpLinkWriter struct {
	s    *Server
	f    *httpFrontend
	tc   *tryConn
	werr error
}

var _ link.TryWriter = (*httpLinkWriter)(nil)

func (w *httpLinkWriter) Write(p []byte) (int, error) {
	w.counted()
	start := time.Now()
	w.f.writes.begin(start)
	n, err := w.f.conn.Write(p)
	w.f.writes.end()
	w.f.m.frontendWrote(start)
	if err != nil {
		w.werr = err
	}
	return n, err
}

// TryWrite writes p whole without waiting, or nothing.
func (w *httpLinkWriter) TryWrite(p []byte) int {
	start := time.Now()
	if !w.tc.tryWrite(w.f.conn, p) {
		return 0
	}
	w.counted()
	w.f.m.frontendWrote(start)
	return len(p)
}

func (w *httpLinkWriter) counted() {
	w.s.m.packet(segFromAgent, client.PacketType_DATA)
	w.s.m.packet(segToClient, client.PacketType_DATA)
}
