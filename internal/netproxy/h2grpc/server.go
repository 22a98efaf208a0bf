// Package h2grpc serves gRPC's bidirectional-streaming methods over
// HTTP/2 with as little as the wire allows: one goroutine reading each
// connection, one per stream running its handler, and every write made
// by the goroutine that has something to say, under one lock, in one
// system call (no writer goroutine, no per-connection buffers of its own).
//
// It exists for the network proxy's ProxyService frontend, where
// kube-apiserver opens a connection, a stream and a dial for every
// proxied connection (a single-use tunnel) and exchanges small messages
// on it: there grpc-go's server spends most of the proxy's CPU per dial
// (its transport's goroutines, buffers and settings per connection) and
// two goroutine hand-offs per message (its writer goroutine, loopy). What
// it keeps of gRPC: the framing, flow control both ways (a stream window
// returned as the handler consumes, so a slow handler holds at most its
// window), deadlines (grpc-timeout), status trailers, metadata into the
// handler's context, keepalive pings, GOAWAY on a graceful stop, and
// refusals of what it does not do (compression, unknown methods, other
// content types) with the status grpc-go would give. It is not a general
// gRPC server: no unary methods, no interceptors, no compression.
package h2grpc

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Handler serves one stream; its error (a status error, or any error as
// codes.Unknown) becomes the stream's status.
type Handler func(*Stream) error

// Config is a Server's: what it serves and its limits.
type Config struct {
	// Methods maps a full method name ("/package.Service/Method") to its
	// handler.
	Methods map[string]Handler
	// Codec marshals and unmarshals messages; Pool holds the buffers of
	// received messages (the codec may keep a reference past RecvMsg).
	Codec encoding.CodecV2
	Pool  mem.BufferPool
	// StreamWindow and ConnWindow are the receive windows offered to
	// clients (at least 64 KiB each).
	StreamWindow, ConnWindow uint32
	// MaxRecvMsgSize bounds one message; larger ones end the stream with
	// RESOURCE_EXHAUSTED.
	MaxRecvMsgSize int
	// MaxConcurrentStreams is told to clients; more are refused.
	MaxConcurrentStreams uint32
	// KeepaliveTime, when set, pings a client after this long without a
	// frame from it, and closes the connection when the ping is not
	// answered within KeepaliveTimeout (20 s if unset).
	KeepaliveTime, KeepaliveTimeout time.Duration
	// HandshakeTimeout bounds a TLS handshake and the client's preface
	// (10 s if unset).
	HandshakeTimeout time.Duration
}

// Server serves the methods of its Config on the listeners given to Serve.
type Server struct {
	cfg Config

	mu       sync.Mutex
	lis      map[net.Listener]struct{}
	conns    map[*serverConn]struct{}
	draining bool
	wg       sync.WaitGroup // one per connection
}

// NewServer returns a server for cfg.
func NewServer(cfg Config) *Server {
	if cfg.StreamWindow < 1<<16 {
		cfg.StreamWindow = 1 << 16
	}
	if cfg.ConnWindow < 1<<16 {
		cfg.ConnWindow = 1 << 16
	}
	if cfg.MaxRecvMsgSize <= 0 {
		cfg.MaxRecvMsgSize = 4 << 20
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 100
	}
	if cfg.KeepaliveTimeout <= 0 {
		cfg.KeepaliveTimeout = 20 * time.Second
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.Pool == nil {
		cfg.Pool = mem.DefaultBufferPool()
	}
	return &Server{cfg: cfg, lis: map[net.Listener]struct{}{}, conns: map[*serverConn]struct{}{}}
}

// Serve accepts connections on l until Stop or GracefulStop, which make
// it return nil; it closes l.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		_ = l.Close()
		return nil
	}
	s.lis[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lis, l)
		s.mu.Unlock()
		_ = l.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.draining
			s.mu.Unlock()
			if stopping {
				return nil
			}
			if temporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		c := newServerConn(s, nc)
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// temporary says whether err is one of accept's passing failures (too
// many open files, a connection aborted before it was accepted), so
// Serve waits and accepts again instead of returning.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) connDone(c *serverConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// GracefulStop stops accepting, tells every client with GOAWAY that no
// new stream will be served, and waits until the streams it serves have
// ended.
func (s *Server) GracefulStop() {
	for _, c := range s.stopAccepting() {
		c.goAway()
	}
	s.wg.Wait()
}

// Stop closes every listener and connection now; handlers see their
// streams end.
func (s *Server) Stop() {
	for _, c := range s.stopAccepting() {
		c.close(errServerStopped)
	}
	s.wg.Wait()
}

var errServerStopped = errors.New("server stopped")

func (s *Server) stopAccepting() []*serverConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	for l := range s.lis {
		_ = l.Close()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// streamCtx is a stream's context: cancelled when the stream ends, which
// its deadline does (a timer that ends the stream, then the context), so
// a handler woken by Done finds the stream already ended; it reports the
// deadline, and DeadlineExceeded once it has passed.
type streamCtx struct {
	context.Context
	deadline time.Time
	expired  atomic.Bool
}

func (c *streamCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *streamCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}
