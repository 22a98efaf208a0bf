package h2grpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Stream is one call: what its handler receives and sends. RecvMsg may be
// called by one goroutine at a time; SendMsg by several (each message is
// written whole before another starts).
type Stream struct {
	c      *serverConn
	id     uint32
	method string
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer // the client's deadline, if it sent one
	// smu keeps a message's frames together when the client's windows
	// make SendMsg write it in several rounds.
	smu sync.Mutex
	// ended is set once the status is written or the stream reset: no
	// frame of it is written after (checked under wmu, where it is set).
	ended       atomic.Bool
	headersSent bool // under wmu

	// sendWin is what the client lets this stream send (under c.mu).
	sendWin int64

	mu      sync.Mutex
	cond    sync.Cond
	q       []queued // received messages, oldest first
	qHead   int
	recvErr error  // io.EOF once the client ended its side, else why the stream ended
	recv    int64  // what the client may still send on the stream
	owed    uint32 // consumed, not yet returned with WINDOW_UPDATE
	// clientDone: the client ended its side (END_STREAM).
	clientDone bool

	// Message assembly, reader goroutine only.
	hdr   [5]byte
	hdrN  int
	bp    *[]byte
	msgN  int
	held  uint32 // window the message in assembly holds
	big   bool   // the message is over half the window
	early bool   // ... and, next to be read, returns its window as it arrives
}

// queued is a received message and what of the stream's window it holds
// until consumed.
type queued struct {
	buf  mem.Buffer
	cost uint32
}

func newStream(c *serverConn, id uint32, method string, ctx context.Context, cancel context.CancelFunc) *Stream {
	st := &Stream{c: c, id: id, method: method, ctx: ctx, cancel: cancel, recv: int64(c.s.cfg.StreamWindow)}
	st.cond.L = &st.mu
	return st
}

// Context is cancelled when the stream ends, with the client's deadline
// and its metadata (metadata.FromIncomingContext).
func (st *Stream) Context() context.Context { return st.ctx }

// Method is the stream's full method name.
func (st *Stream) Method() string { return st.method }

// SetHeader, SendHeader and SetTrailer satisfy grpc.ServerStream; this
// server sends no metadata of its own, so only SendHeader does anything.
func (st *Stream) SetHeader(metadata.MD) error { return nil }
func (st *Stream) SetTrailer(metadata.MD)      {}
func (st *Stream) SendHeader(metadata.MD) error {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if st.ended.Load() {
		return st.endedErr()
	}
	if st.headersSent {
		return nil
	}
	st.headersSent = true
	b := c.appendResponseHeaders(c.scratch[:0], st.id)
	c.scratch = b[:0]
	return c.writeLocked(net.Buffers{b})
}

func (st *Stream) run(h Handler) { st.finish(h(st)) }

// finish writes the handler's status and forgets the stream.
func (st *Stream) finish(err error) {
	st.endWithStatus(err)
	st.c.streamDone(st)
}

// endWithStatus ends the stream with err's status (OK for nil), as
// grpc-go's server gives it: a status error's own, a context's end as
// CANCELLED or DEADLINE_EXCEEDED, anything else UNKNOWN. A client still
// sending is told to stop (RST_STREAM NO_ERROR), as HTTP/2 allows a
// server that has answered.
func (st *Stream) endWithStatus(err error) {
	c := st.c
	s, ok := status.FromError(err)
	if !ok && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		s = status.FromContextError(err)
	}
	c.wmu.Lock()
	if !st.ended.Swap(true) {
		b := c.appendTrailers(c.scratch[:0], st.id, st.headersSent, s.Code(), s.Message())
		st.mu.Lock()
		clientDone := st.clientDone
		st.mu.Unlock()
		if !clientDone {
			b = appendRSTStream(b, st.id, http2.ErrCodeNo)
		}
		c.scratch = b[:0]
		c.dataSent.Store(true)
		_ = c.writeLocked(net.Buffers{b})
	}
	c.wmu.Unlock()
	st.release(status.Error(codes.Canceled, "the stream has ended"))
}

// abort ends the stream early: the client reset it (code 0), its
// connection closed (code 0), or this side found it broken (code sent
// in RST_STREAM). The handler sees err from RecvMsg and SendMsg.
func (st *Stream) abort(err error, code http2.ErrCode) {
	c := st.c
	c.wmu.Lock()
	if !st.ended.Swap(true) && code != 0 {
		_ = c.writeLocked(net.Buffers{appendRSTStream(nil, st.id, code)})
	}
	c.wmu.Unlock()
	st.release(err)
}

// release wakes the handler's waits with err and returns what the stream
// holds of the pool.
func (st *Stream) release(err error) {
	if st.timer != nil {
		st.timer.Stop()
	}
	st.mu.Lock()
	if st.recvErr == nil || st.recvErr == io.EOF {
		st.recvErr = err
	}
	for i := st.qHead; i < len(st.q); i++ {
		st.q[i].buf.Free()
	}
	st.q, st.qHead = nil, 0
	if st.bp != nil {
		st.c.s.cfg.Pool.Put(st.bp)
		st.bp = nil
	}
	st.cond.Broadcast()
	st.mu.Unlock()
	// After the error is set: a handler woken by its context finds it.
	st.cancel()
	c := st.c
	c.mu.Lock()
	c.winCond.Broadcast()
	c.mu.Unlock()
}

// ctxErr is the error for a stream whose context has ended: why the
// stream ended if it has, else the context's own (its deadline).
func (st *Stream) ctxErr(err error) error {
	if st.ended.Load() {
		return st.endedErr()
	}
	return status.FromContextError(err).Err()
}

func (st *Stream) endedErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.recvErr != nil && st.recvErr != io.EOF {
		return st.recvErr
	}
	return status.Error(codes.Canceled, "the stream has ended")
}

// endRecv records the client's END_STREAM.
func (st *Stream) endRecv() {
	st.mu.Lock()
	st.clientDone = true
	inside := st.hdrN > 0
	if !inside && st.recvErr == nil {
		st.recvErr = io.EOF
	}
	st.cond.Broadcast()
	st.mu.Unlock()
	if inside {
		st.abort(status.Error(codes.Internal, "the client ended the stream inside a message"), http2.ErrCodeProtocol)
	}
}

// onData takes a DATA frame's payload (the reader's goroutine): gRPC
// messages, each a flag byte, a 4-byte length and the message.
func (st *Stream) onData(data []byte, pad uint32, end bool) {
	cfg := &st.c.s.cfg
	st.mu.Lock()
	if st.ended.Load() || st.recvErr != nil && st.recvErr != io.EOF {
		st.mu.Unlock()
		return // ended: the client's frames in flight
	}
	if st.clientDone {
		st.mu.Unlock()
		st.abort(status.Error(codes.Internal, "DATA after the client ended the stream"), http2.ErrCodeStreamClosed)
		return
	}
	st.recv -= int64(len(data)) + int64(pad)
	if st.recv < 0 {
		st.mu.Unlock()
		st.abort(status.Error(codes.Internal, "the client sent past the stream's window"), http2.ErrCodeFlowControl)
		return
	}
	// A message holds the window its bytes took until the handler
	// consumes it, so a handler that stops reading stops the client after
	// a window. A message too large for that (over half the window)
	// returns its bytes as they arrive instead, or it could never arrive,
	// but only as the next message to be read (nothing queued before it):
	// so a stream holds at most its window and one message in assembly,
	// whose buffer, bounded by MaxRecvMsgSize, is taken whole anyway.
	early := pad
	for len(data) > 0 {
		if st.hdrN < 5 {
			k := copy(st.hdr[st.hdrN:], data)
			st.hdrN += k
			data = data[k:]
			st.held += uint32(k)
			if st.hdrN < 5 {
				break
			}
			if st.hdr[0]&1 != 0 {
				st.mu.Unlock()
				st.endWithStatus(status.Error(codes.Internal, "compressed message received, but no compression was negotiated"))
				return
			}
			n := binary.BigEndian.Uint32(st.hdr[1:])
			if int64(n) > int64(cfg.MaxRecvMsgSize) {
				st.mu.Unlock()
				st.endWithStatus(status.Errorf(codes.ResourceExhausted, "received message larger than max (%d vs. %d)", n, cfg.MaxRecvMsgSize))
				return
			}
			st.big = 5+int64(n) > int64(cfg.StreamWindow/2)
			st.early = st.big && st.qHead == len(st.q)
			if st.early {
				early += st.held
				st.held = 0
			}
			st.bp = cfg.Pool.Get(int(n))
			st.msgN = 0
		}
		want := len(*st.bp) - st.msgN
		k := copy((*st.bp)[st.msgN:], data[:min(want, len(data))])
		st.msgN += k
		data = data[k:]
		if st.early {
			early += uint32(k)
		} else {
			st.held += uint32(k)
		}
		if st.msgN < len(*st.bp) {
			break
		}
		st.q = append(st.q, queued{buf: mem.NewBuffer(st.bp, cfg.Pool), cost: st.held})
		st.bp, st.hdrN, st.msgN, st.held, st.big, st.early = nil, 0, 0, 0, false, false
	}
	upd := st.owe(early)
	st.cond.Signal()
	st.mu.Unlock()
	if upd > 0 {
		st.c.pend(appendWindowUpdate(nil, st.id, upd))
	}
	if end {
		st.endRecv()
	}
}

// owe records n consumed bytes and says what to return now (under mu).
func (st *Stream) owe(n uint32) uint32 {
	st.owed += n
	if !windowUpdate(st.owed, st.c.s.cfg.StreamWindow) {
		return 0
	}
	upd := st.owed
	st.owed = 0
	st.recv += int64(upd)
	return upd
}

// RecvMsg receives the next message into m with the server's codec; it
// returns io.EOF once the client has ended its side.
func (st *Stream) RecvMsg(m any) error {
	if err := st.ctx.Err(); err != nil {
		return st.ctxErr(err)
	}
	st.mu.Lock()
	for st.qHead == len(st.q) && st.recvErr == nil {
		st.cond.Wait()
	}
	if st.qHead == len(st.q) {
		err := st.recvErr
		st.mu.Unlock()
		return err
	}
	it := st.q[st.qHead]
	st.q[st.qHead] = queued{}
	st.qHead++
	cost := it.cost
	if st.qHead == len(st.q) {
		st.q, st.qHead = st.q[:0], 0
		if st.big && !st.early {
			// The large message in assembly is next: its window goes
			// back as it arrives from now on.
			st.early = true
			cost += st.held
			st.held = 0
		}
	}
	upd := st.owe(cost)
	st.mu.Unlock()
	if upd > 0 && !st.ended.Load() {
		_ = st.c.writeControl(appendWindowUpdate(nil, st.id, upd))
	}
	err := st.c.s.cfg.Codec.Unmarshal(mem.BufferSlice{it.buf}, m)
	it.buf.Free()
	if err != nil {
		return status.Errorf(codes.Internal, "decoding a message: %v", err)
	}
	return nil
}

// SendMsg sends m, written by the calling goroutine as the client's
// windows allow.
func (st *Stream) SendMsg(m any) error {
	if st.ended.Load() {
		return st.endedErr()
	}
	if err := st.ctx.Err(); err != nil {
		return st.ctxErr(err)
	}
	data, err := st.c.s.cfg.Codec.Marshal(m)
	if err != nil {
		return status.Errorf(codes.Internal, "encoding a message: %v", err)
	}
	defer data.Free()
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(data.Len()))
	pieces := make([][]byte, 0, 1+len(data))
	pieces = append(pieces, prefix[:])
	for _, b := range data {
		pieces = append(pieces, b.ReadOnlyData())
	}
	total := 5 + data.Len()
	st.smu.Lock()
	defer st.smu.Unlock()
	for sent := 0; sent < total; {
		n, err := st.reserve(total - sent)
		if err != nil {
			return err
		}
		if err := st.writeData(pieces, sent, n); err != nil {
			st.unreserve(n)
			return err
		}
		sent += n
	}
	return nil
}

// reserve waits until the client's windows let the stream send, and takes
// up to want of them.
func (st *Stream) reserve(want int) (int, error) {
	c := st.c
	c.mu.Lock()
	for {
		if st.ended.Load() || c.closed {
			c.mu.Unlock()
			return 0, st.endedErr()
		}
		if avail := min(c.connSendWin, st.sendWin); avail > 0 {
			n := int(min(avail, int64(want)))
			c.connSendWin -= int64(n)
			st.sendWin -= int64(n)
			c.mu.Unlock()
			return n, nil
		}
		c.winCond.Wait()
	}
}

// unreserve gives back window reserved for a write that did not happen:
// the connection's is shared by every stream on it.
func (st *Stream) unreserve(n int) {
	c := st.c
	c.mu.Lock()
	c.connSendWin += int64(n)
	st.sendWin += int64(n)
	c.winCond.Broadcast()
	c.mu.Unlock()
}

// writeData writes n bytes of the message's pieces from off as DATA
// frames, the response's headers first if they are not out yet.
func (st *Stream) writeData(pieces [][]byte, off, n int) error {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if st.ended.Load() {
		return st.endedErr()
	}
	b := c.scratch[:0]
	if !st.headersSent {
		st.headersSent = true
		b = c.appendResponseHeaders(b, st.id)
	}
	// Frame headers go in b (grown before any slice of it is taken), the
	// payload is written from the pieces themselves.
	frames := (n + c.maxFrame - 1) / c.maxFrame
	if need := len(b) + 9*frames; cap(b) < need {
		b = append(make([]byte, 0, need), b...)
	}
	iov := c.iov[:0]
	hdrStart := len(b)
	if hdrStart > 0 {
		iov = append(iov, b[:hdrStart])
	}
	pi, po := locate(pieces, off)
	for left := n; left > 0; {
		fl := min(left, c.maxFrame)
		start := len(b)
		b = appendFrameHeader(b, fl, http2.FrameData, 0, st.id)
		iov = append(iov, b[start:len(b):len(b)])
		for k := fl; k > 0; {
			p := pieces[pi][po:]
			take := min(k, len(p))
			iov = append(iov, p[:take])
			k -= take
			po += take
			if po == len(pieces[pi]) {
				pi, po = pi+1, 0
			}
		}
		left -= fl
	}
	c.scratch = b[:0]
	c.dataSent.Store(true)
	err := c.writeLocked(iov)
	c.iov = iov[:0]
	return err
}

// locate finds byte off of the pieces: which piece, and where in it.
func locate(pieces [][]byte, off int) (int, int) {
	for i, p := range pieces {
		if off < len(p) {
			return i, off
		}
		off -= len(p)
	}
	return len(pieces), 0
}
