package netproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// BatchTLS wraps TLS transport credentials so that one Write of the
// connection costs one write(2), not one per TLS record: crypto/tls
// writes every record of at most 16 KiB with a system call of its own,
// and gRPC flushes up to IOBufferSize at once, so the server ↔ agent link
// made 16 system calls per 256 KiB. Reads from the socket go through a
// buffer of IOBufferSize, so that a read takes all the records that
// arrived rather than about one.
func BatchTLS(c credentials.TransportCredentials) credentials.TransportCredentials {
	return batchCreds{c}
}

type batchCreds struct {
	credentials.TransportCredentials
}

func (c batchCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	bc := newBatchConn(raw)
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, bc)
	if err != nil {
		return nil, nil, err
	}
	return &batchedConn{Conn: conn, raw: bc}, info, nil
}

func (c batchCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	bc := newBatchConn(raw)
	conn, info, err := c.TransportCredentials.ServerHandshake(bc)
	if err != nil {
		return nil, nil, err
	}
	return &batchedConn{Conn: conn, raw: bc}, info, nil
}

func (c batchCreds) Clone() credentials.TransportCredentials {
	return batchCreds{c.TransportCredentials.Clone()}
}

// batchConn is the socket under TLS: while a batch is open, writes are
// collected and go out as one at its end.
type batchConn struct {
	net.Conn
	r *bufio.Reader

	mu    sync.Mutex
	depth int
	buf   []byte
}

func newBatchConn(raw net.Conn) *batchConn {
	return &batchConn{Conn: raw, r: bufio.NewReaderSize(raw, IOBufferSize)}
}

func (c *batchConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.depth > 0 {
		c.buf = append(c.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *batchConn) begin() {
	c.mu.Lock()
	c.depth++
	c.mu.Unlock()
}

func (c *batchConn) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.depth--
	if c.depth > 0 || len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > 2*IOBufferSize {
		c.buf = nil // an unusual burst: do not keep it
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// batchedConn is the TLS connection gRPC uses; each Write is one batch.
type batchedConn struct {
	net.Conn
	raw *batchConn
}

func (c *batchedConn) Write(p []byte) (int, error) {
	c.raw.begin()
	n, err := c.Conn.Write(p)
	if ferr := c.raw.end(); ferr != nil && err == nil {
		return 0, ferr
	}
	return n, err
}

// HandshakeTLS runs a TLS handshake over raw (client side when client)
// and returns the connection batched as BatchTLS's: one write(2) per
// Write, reads through a buffer of IOBufferSize. For the links that do
// not go through gRPC's credentials (portside-link/2, and the agent port's
// ALPN demultiplexing, which hands gRPC connections already handshaken).
func HandshakeTLS(ctx context.Context, raw net.Conn, cfg *tls.Config, client bool) (net.Conn, tls.ConnectionState, error) {
	bc := newBatchConn(raw)
	var tc *tls.Conn
	if client {
		tc = tls.Client(bc, cfg)
	} else {
		tc = tls.Server(bc, cfg)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, tls.ConnectionState{}, err
	}
	return &batchedConn{Conn: tc, raw: bc}, tc.ConnectionState(), nil
}
