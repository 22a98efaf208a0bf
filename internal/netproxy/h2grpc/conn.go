package h2grpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	defaultWindow    = 65535
	defaultFrameSize = 16384
	maxWindow        = 1<<31 - 1
	// pingMinInterval: a client pinging more often than this with no
	// stream data between is told to calm down after pingStrikes (as
	// grpc-go's server enforces its keepalive policy).
	pingMinInterval = 5 * time.Second
	pingStrikes     = 2
)

// serverConn is one client connection. Its goroutine (serve) reads every
// frame; writes come from whichever goroutine has something to send,
// under wmu.
type serverConn struct {
	s   *Server
	nc  net.Conn
	fr  *http2.Framer
	br  *bufio.Reader
	ctx context.Context
	// frames counts frames read, for keepalive.
	frames atomic.Uint64
	// ready: the client's preface was read (and TLS handshaken).
	ready atomic.Bool

	wmu     sync.Mutex
	henc    *hpack.Encoder
	hbuf    []byte // HEADERS blocks, encoded under wmu
	scratch []byte // frame headers and small frames of one write
	iov     net.Buffers
	flat    []byte // a write coalesced, where the conn has no writev (TLS)
	// pending holds the reader's answers (settings and ping acks, window
	// updates): they go with the next write, or when the reader has
	// nothing buffered to read, so the frames of one read are answered in
	// one write.
	pending  []byte
	vectored bool
	maxFrame int
	dataSent atomic.Bool // DATA or HEADERS written since the client's last ping

	mu          sync.Mutex
	winCond     *sync.Cond
	streams     map[uint32]*Stream
	maxID       uint32
	connSendWin int64 // what the client lets this side send
	initSendWin int64 // the client's INITIAL_WINDOW_SIZE
	connRecv    int64 // what the client may still send before a WINDOW_UPDATE
	connOwed    uint32
	goingAway   bool
	closed      bool
	closeErr    error

	// Reader-only state.
	lastPing time.Time
	strikes  int
	// Keepalive state (timer callbacks; under mu).
	kaTimer    *time.Timer
	kaFrames   uint64
	kaPingSent bool
}

func newServerConn(s *Server, nc net.Conn) *serverConn {
	c := &serverConn{s: s, nc: nc, streams: map[uint32]*Stream{},
		connSendWin: defaultWindow, initSendWin: defaultWindow, connRecv: int64(s.cfg.ConnWindow),
		maxFrame: defaultFrameSize}
	c.winCond = sync.NewCond(&c.mu)
	switch nc.(type) {
	case *net.UnixConn, *net.TCPConn:
		c.vectored = true
	}
	return c
}

// serve reads the connection until it fails or closes, then ends every
// stream on it.
func (c *serverConn) serve() {
	defer c.s.connDone(c)
	var cancel context.CancelFunc
	c.ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	err := c.run()
	c.close(err)
}

func (c *serverConn) run() error {
	cfg := &c.s.cfg
	_ = c.nc.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	if tc, ok := c.nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
	}
	// What the reader queued to answer goes out before it next waits for
	// the client: when it is out of buffered bytes, in the middle of a
	// frame or not.
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(flushingReader{c})
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	c.br = br
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil {
		return fmt.Errorf("reading the HTTP/2 preface: %w", err)
	}
	if string(preface) != http2.ClientPreface {
		return errors.New("not an HTTP/2 client: its preface is wrong (is it speaking gRPC over HTTP/2?)")
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.fr = http2.NewFramer(nil, br)
	c.fr.SetMaxReadFrameSize(defaultFrameSize)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 64 << 10
	c.fr.SetReuseFrames()
	c.henc = hpack.NewEncoder(hpackWriter{c})

	c.ready.Store(true)
	// The server's preface: its settings and the connection's window.
	b := appendSettings(nil, []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: cfg.MaxConcurrentStreams},
		{ID: http2.SettingInitialWindowSize, Val: cfg.StreamWindow},
		{ID: http2.SettingMaxHeaderListSize, Val: 64 << 10},
	})
	if cfg.ConnWindow > defaultWindow {
		b = appendWindowUpdate(b, 0, cfg.ConnWindow-defaultWindow)
	}
	c.pend(b)
	if cfg.KeepaliveTime > 0 {
		c.mu.Lock()
		c.kaTimer = time.AfterFunc(cfg.KeepaliveTime, c.keepalive)
		c.mu.Unlock()
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A stream opened by malformed HEADERS is opened and reset:
				// what the client has in flight for it is then ignored.
				if se.StreamID%2 == 1 && se.StreamID > c.maxID {
					c.setMaxID(se.StreamID)
				}
				c.resetStream(se.StreamID, se.Code, status.Error(codes.Internal, se.Error()))
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.fatal(http2.ErrCode(ce), "")
			}
			return err
		}
		c.frames.Add(1)
		if err := c.frame(f); err != nil {
			return err
		}
	}
}

// frame acts on one frame; an error ends the connection.
func (c *serverConn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f.StreamID, f.Increment)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.RSTStreamFrame:
		if f.StreamID > c.maxID {
			return c.fatal(http2.ErrCodeProtocol, fmt.Sprintf("RST_STREAM on stream %d, which the client never opened", f.StreamID))
		}
		c.resetStream(f.StreamID, 0, status.Errorf(codes.Canceled, "the client reset the stream (%v)", f.ErrCode))
	case *http2.GoAwayFrame:
		// The client opens no more streams; those it has run on.
	case *http2.PushPromiseFrame:
		return c.fatal(http2.ErrCodeProtocol, "clients may not push")
	}
	return nil
}

func (c *serverConn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st != nil {
		// The client's trailers: only to end its side.
		if !f.StreamEnded() {
			c.resetStream(id, http2.ErrCodeProtocol, status.Error(codes.Internal, "HEADERS in the middle of a stream"))
			return nil
		}
		st.endRecv()
		return nil
	}
	if id%2 == 0 {
		return c.fatal(http2.ErrCodeProtocol, fmt.Sprintf("stream %d is not a client's (odd) stream", id))
	}
	if id <= c.maxID {
		// A stream that has ended here (answered or reset): its frames in
		// flight are the client's, not an error of the connection.
		return c.writeControl(appendRSTStream(nil, id, http2.ErrCodeStreamClosed))
	}
	c.setMaxID(id)
	if f.Truncated {
		return c.refuse(id, f.StreamEnded(), refusal{httpStatus: 431, msg: "request headers too large"})
	}
	r, ref := decideRequest(f.Fields)
	if ref != nil {
		return c.refuse(id, f.StreamEnded(), *ref)
	}
	if r.hasTimeout && r.timeout <= 0 {
		// Due already (grpc-go sends 0n then): no handler runs.
		return c.refuse(id, f.StreamEnded(), refusal{code: codes.DeadlineExceeded, msg: "the client's deadline had passed"})
	}
	h := c.s.cfg.Methods[r.method]
	if h == nil {
		return c.refuse(id, f.StreamEnded(), refusal{code: codes.Unimplemented, msg: "unknown method " + r.method})
	}
	c.mu.Lock()
	if c.goingAway || c.closed || uint32(len(c.streams)) >= c.s.cfg.MaxConcurrentStreams {
		c.mu.Unlock()
		return c.writeControl(appendRSTStream(nil, id, http2.ErrCodeRefusedStream))
	}
	sctx := &streamCtx{}
	var cancel context.CancelFunc
	sctx.Context, cancel = context.WithCancel(c.ctx)
	var ctx context.Context = sctx
	if r.md != nil {
		ctx = metadata.NewIncomingContext(ctx, metadata.MD(r.md))
	}
	st = newStream(c, id, r.method, ctx, cancel)
	st.sendWin = c.initSendWin
	c.streams[id] = st
	if r.hasTimeout {
		sctx.deadline = time.Now().Add(r.timeout)
		st.timer = time.AfterFunc(r.timeout, func() {
			sctx.expired.Store(true)
			st.abort(status.Error(codes.DeadlineExceeded, "the client's deadline was exceeded"), http2.ErrCodeCancel)
		})
	}
	c.mu.Unlock()
	if f.StreamEnded() {
		st.endRecv()
	}
	go st.run(h)
	return nil
}

// refuse answers a stream no handler sees.
func (c *serverConn) refuse(id uint32, ended bool, r refusal) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if r.httpStatus != 0 {
		c.hbuf = c.hbuf[:0]
		c.field(":status", fmt.Sprint(r.httpStatus))
		c.field("content-type", "text/plain")
		b := appendHeaders(c.scratch[:0], id, c.hbuf, true)
		if !ended {
			b = appendRSTStream(b, id, http2.ErrCodeNo)
		}
		return c.writeLocked(net.Buffers{b})
	}
	b := c.appendTrailers(c.scratch[:0], id, false, r.code, r.msg)
	if !ended {
		b = appendRSTStream(b, id, http2.ErrCodeNo)
	}
	return c.writeLocked(net.Buffers{b})
}

func (c *serverConn) onData(f *http2.DataFrame) error {
	n := f.Header().Length
	c.mu.Lock()
	c.connRecv -= int64(n)
	if c.connRecv < 0 {
		c.mu.Unlock()
		return c.fatal(http2.ErrCodeFlowControl, "the client sent past the connection's window")
	}
	// The connection's window is returned as DATA arrives: what a stream
	// holds is bounded by its own window, returned as its handler reads.
	c.connOwed += n
	var upd uint32
	if windowUpdate(c.connOwed, c.s.cfg.ConnWindow) {
		upd, c.connOwed = c.connOwed, 0
		c.connRecv += int64(upd)
	}
	st := c.streams[f.StreamID]
	c.mu.Unlock()
	if upd > 0 {
		c.pend(appendWindowUpdate(nil, 0, upd))
	}
	if st == nil {
		if f.StreamID > c.maxID {
			return c.fatal(http2.ErrCodeProtocol, fmt.Sprintf("DATA on stream %d, which the client never opened", f.StreamID))
		}
		return nil // a stream that has ended: its last frames in flight
	}
	st.onData(f.Data(), n-uint32(len(f.Data())), f.StreamEnded())
	return nil
}

func (c *serverConn) onWindowUpdate(id, inc uint32) error {
	c.mu.Lock()
	if id == 0 {
		if c.connSendWin+int64(inc) > maxWindow {
			c.mu.Unlock()
			return c.fatal(http2.ErrCodeFlowControl, "the connection's window overflowed")
		}
		c.connSendWin += int64(inc)
	} else if st := c.streams[id]; st != nil {
		if st.sendWin+int64(inc) > maxWindow {
			c.mu.Unlock()
			c.resetStream(id, http2.ErrCodeFlowControl, status.Error(codes.Internal, "the stream's window overflowed"))
			return nil
		}
		st.sendWin += int64(inc)
	}
	c.winCond.Broadcast()
	c.mu.Unlock()
	return nil
}

func (c *serverConn) onSettings(f *http2.SettingsFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err // a frame size or window out of range, or a bad push flag
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			delta := int64(s.Val) - c.initSendWin
			for _, st := range c.streams {
				if st.sendWin+delta > maxWindow {
					c.mu.Unlock()
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.initSendWin = int64(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
			}
			c.winCond.Broadcast()
			c.mu.Unlock()
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			c.pending = appendGoAway(c.pending, c.lastID(), http2.ErrCode(ce), "invalid settings")
			_ = c.writeLocked(nil)
		}
		return fmt.Errorf("invalid settings: %w", err)
	}
	c.pending = appendSettingsAck(c.pending)
	return nil
}

// setMaxID records the highest stream the client opened (the reader's;
// read under mu by goAway).
func (c *serverConn) setMaxID(id uint32) {
	c.mu.Lock()
	c.maxID = id
	c.mu.Unlock()
}

func (c *serverConn) lastID() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxID
}

func (c *serverConn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		c.mu.Lock()
		c.kaPingSent = false
		c.mu.Unlock()
		return nil
	}
	now := time.Now()
	if c.dataSent.Swap(false) {
		c.strikes = 0
	} else if !c.lastPing.IsZero() && now.Sub(c.lastPing) < pingMinInterval {
		c.strikes++
		if c.strikes > pingStrikes {
			return c.fatal(http2.ErrCodeEnhanceYourCalm, "too_many_pings")
		}
	}
	c.lastPing = now
	c.wmu.Lock()
	c.pending = appendPing(c.pending, true, f.Data)
	c.wmu.Unlock()
	return nil
}

// keepalive runs on its timer: a client silent for KeepaliveTime gets a
// ping, one silent for KeepaliveTimeout after it loses its connection.
func (c *serverConn) keepalive() {
	cfg := &c.s.cfg
	frames := c.frames.Load()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	switch {
	case frames != c.kaFrames:
		c.kaFrames, c.kaPingSent = frames, false
		c.kaTimer.Reset(cfg.KeepaliveTime)
		c.mu.Unlock()
	case c.kaPingSent:
		c.mu.Unlock()
		c.close(errors.New("keepalive ping not answered"))
	default:
		c.kaPingSent = true
		c.kaTimer.Reset(cfg.KeepaliveTimeout)
		c.mu.Unlock()
		_ = c.writeControl(appendPing(nil, false, [8]byte{'k', 'a'}))
	}
}

// resetStream ends a stream for the client's RST_STREAM (code 0: nothing
// to send back) or for an error of the stream's own.
func (c *serverConn) resetStream(id uint32, code http2.ErrCode, err error) {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st != nil {
		st.abort(err, code)
		return
	}
	if code != 0 {
		_ = c.writeControl(appendRSTStream(nil, id, code))
	}
}

// goAway tells the client no stream after those it has will be served,
// and closes the connection once they end.
func (c *serverConn) goAway() {
	c.mu.Lock()
	if c.goingAway || c.closed {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	last, idle := c.maxID, len(c.streams) == 0
	c.mu.Unlock()
	if !c.ready.Load() {
		// Still in its TLS handshake or preface: nothing to drain, and a
		// write now would wait on the handshake.
		c.close(errServerStopped)
		return
	}
	_ = c.writeControl(appendGoAway(nil, last, http2.ErrCodeNo, ""))
	if idle {
		c.close(errServerStopped)
	}
}

// fatal ends the connection for a protocol error of the client's,
// telling it why.
func (c *serverConn) fatal(code http2.ErrCode, msg string) error {
	_ = c.writeControl(appendGoAway(nil, c.lastID(), code, msg))
	return fmt.Errorf("HTTP/2 %v: %s", code, msg)
}

// streamDone forgets an ended stream; a draining connection closes with
// its last one.
func (c *serverConn) streamDone(st *Stream) {
	c.mu.Lock()
	delete(c.streams, st.id)
	last := c.goingAway && len(c.streams) == 0
	c.mu.Unlock()
	if last {
		c.close(errServerStopped)
	}
}

// close ends the connection and every stream on it.
func (c *serverConn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.closeErr = true, err
	streams := make([]*Stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	c.winCond.Broadcast()
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, st := range streams {
		st.abort(status.Error(codes.Unavailable, "the client's connection closed"), 0)
	}
}

// pend queues frames to go with the next write.
func (c *serverConn) pend(b []byte) {
	c.wmu.Lock()
	c.pending = append(c.pending, b...)
	c.wmu.Unlock()
}

// flushPending writes what pend queued, if anything.
func (c *serverConn) flushPending() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	return c.writeLocked(nil)
}

// readerPool holds the connections' read buffers: a connection per
// proxied connection made a fresh 32 KiB buffer a third of the bytes the
// frontend allocated.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// flushingReader reads the connection after writing what is pending.
type flushingReader struct{ c *serverConn }

func (r flushingReader) Read(p []byte) (int, error) {
	if err := r.c.flushPending(); err != nil {
		return 0, err
	}
	return r.c.nc.Read(p)
}

// writeControl writes a small frame (or a few) built outside wmu.
func (c *serverConn) writeControl(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(net.Buffers{b})
}

// writeLocked writes bufs in one system call where the connection allows
// (writev), else coalesced into one Write (a TLS record, not one per
// piece). A failed write closes the connection.
func (c *serverConn) writeLocked(bufs net.Buffers) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return errConnClosed
	}
	if len(c.pending) > 0 {
		bufs = append(net.Buffers{c.pending}, bufs...)
		defer func() { c.pending = c.pending[:0] }()
	}
	var err error
	if c.vectored || len(bufs) == 1 {
		_, err = bufs.WriteTo(c.nc)
	} else {
		c.flat = c.flat[:0]
		for _, b := range bufs {
			c.flat = append(c.flat, b...)
		}
		_, err = c.nc.Write(c.flat)
		if cap(c.flat) > 1<<20 {
			c.flat = nil
		}
	}
	if err != nil {
		go c.close(err)
		return errConnClosed
	}
	return nil
}

var errConnClosed = status.Error(codes.Unavailable, "the client's connection closed")

// field appends one header field to hbuf (under wmu).
func (c *serverConn) field(name, value string) {
	_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// hpackWriter lets the encoder append to hbuf.
type hpackWriter struct{ c *serverConn }

func (w hpackWriter) Write(p []byte) (int, error) {
	w.c.hbuf = append(w.c.hbuf, p...)
	return len(p), nil
}
