package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Stream is one proxied connection on a session. Read and Write may be
// called at once from two goroutines; Close ends it both ways, as
// konnectivity's CLOSE does.
type Stream struct {
	s  *Session
	id uint64

	mu   sync.Mutex
	cond *sync.Cond // reads, writes and the dial wait on it
	// recv is what arrived and was not read yet (pooled buffers; the first
	// from off on); buffered its length, never over the window.
	recv     [][]byte
	off      int
	buffered int
	// consumed is read but not yet credited back to the sender.
	consumed int
	credit   int // what this side may still send
	// peerWindow is the peer's receive window (from Dial or DialOK): what
	// credit can never exceed.
	peerWindow int
	accepted   bool // the accepting side answered the dial (data may come)
	// dialed: 0 waiting for the answer, 1 accepted, -1 refused.
	dialed  int
	dialErr string
	local   bool  // Close called
	remote  bool  // the peer's Close arrived
	err     error // the session failed
	removed bool
	// direct is WriteTo's destination when it can take writes that never
	// wait (TryWriter): the session's reader then writes what arrives
	// straight to it while nothing is queued and WriteTo is not writing
	// (writing), instead of waking WriteTo's goroutine for each payload.
	direct  TryWriter
	writing bool
}

// TryWriter is a destination (the agent's socket to it) that can take a
// write without waiting: TryWrite writes what fits of p now (a
// non-blocking socket's one write(2)) and says how much, 0 on any
// failure (the next Write meets it).
type TryWriter interface {
	io.Writer
	TryWrite(p []byte) int
}

func newStream(s *Session, id uint64) *Stream {
	st := &Stream{s: s, id: id}
	st.cond = sync.NewCond(&st.mu)
	return st
}

// ID is the connection's ID on its session.
func (st *Stream) ID() uint64 { return st.id }

// push takes a DATA payload from the reader; more than the credit given
// is the peer's protocol error. A payload that fits in the last buffer's
// spare room is copied there, so what the window allows is what is held
// (small writes would otherwise pin a pooled buffer each).
func (st *Stream) push(buf []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case len(buf) == 0:
		putBuf(buf)
		return fmt.Errorf("portside-link: connection %d sent an empty data frame", st.id)
	case !st.accepted:
		putBuf(buf)
		return fmt.Errorf("portside-link: connection %d sent data before its dial was answered", st.id)
	case st.local || st.remote || st.err != nil:
		// Closed here, or data after the peer's own Close (a write that
		// raced it): dropped.
		putBuf(buf)
		return nil
	case st.buffered+len(buf) > st.s.window:
		putBuf(buf)
		return fmt.Errorf("portside-link: connection %d sent %d bytes over its credit of %d", st.id, st.buffered+len(buf)-st.s.window, st.s.window)
	}
	st.buffered += len(buf)
	if st.direct != nil && len(st.recv) == 0 && !st.writing {
		// Nothing queued before it and WriteTo not writing: written here,
		// in order, with one system call and no goroutine woken (the
		// lock is held only for a write that does not wait). What did
		// not fit is queued for WriteTo as usual.
		n := st.direct.TryWrite(buf)
		var err error
		if credit := st.consumeLocked(n); credit > 0 {
			// The reader never waits for the write path; a credit it
			// could not queue would leave the sender waiting for ever,
			// so that fails the session (as a pong would).
			err = st.s.writeFrameAsync(header{typ: frameCredit, id: st.id}, creditPayload(credit))
		}
		if n == len(buf) {
			putBuf(buf)
			return err
		}
		st.recv, st.off = append(st.recv, buf), n
		st.cond.Broadcast()
		return err
	}
	if n := len(st.recv); n > 0 && cap(st.recv[n-1])-len(st.recv[n-1]) >= len(buf) {
		st.recv[n-1] = append(st.recv[n-1], buf...)
		putBuf(buf)
	} else {
		st.recv = append(st.recv, buf)
	}
	st.cond.Broadcast()
	return nil
}

// addCredit is the peer's credit frame: never zero, never beyond its own
// window in all (else an overflow would make credit negative).
func (st *Stream) addCredit(n uint32) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n == 0 || st.dialed == 0 && !st.accepted || int64(st.credit)+int64(n) > int64(st.peerWindow) {
		return fmt.Errorf("portside-link: connection %d was given %d bytes of credit, over its window of %d", st.id, n, st.peerWindow)
	}
	st.credit += int(n)
	st.cond.Broadcast()
	return nil
}

// remoteClose is the peer's Close: reads end after what arrived, writes
// fail.
func (st *Stream) remoteClose() {
	st.mu.Lock()
	st.remote = true
	done := st.local
	st.cond.Broadcast()
	st.mu.Unlock()
	if done {
		st.finish()
	}
}

// abort is the session's end.
func (st *Stream) abort(err error) {
	st.mu.Lock()
	st.err = err
	st.freeRecv()
	st.cond.Broadcast()
	st.mu.Unlock()
}

// finish removes the stream from its session once both sides are done.
func (st *Stream) finish() {
	st.mu.Lock()
	if st.removed {
		st.mu.Unlock()
		return
	}
	st.removed = true
	st.mu.Unlock()
	st.s.remove(st.id)
}

func (st *Stream) freeRecv() {
	for _, b := range st.recv {
		putBuf(b)
	}
	st.recv, st.off, st.buffered = nil, 0, 0
}

// errClosed is a Read or Write after Close.
var errClosed = errors.New("portside-link: use of a closed connection")

// Read reads what arrived; io.EOF after the peer's Close.
func (st *Stream) Read(p []byte) (int, error) {
	st.mu.Lock()
	for len(st.recv) == 0 && !st.remote && !st.local && st.err == nil {
		st.cond.Wait()
	}
	if st.local {
		st.mu.Unlock()
		return 0, errClosed
	}
	if len(st.recv) == 0 {
		err := st.err
		st.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	n := 0
	for n < len(p) && len(st.recv) > 0 {
		c := copy(p[n:], st.recv[0][st.off:])
		n += c
		st.off += c
		if st.off == len(st.recv[0]) {
			putBuf(st.recv[0])
			st.recv[0] = nil
			st.recv, st.off = st.recv[1:], 0
		}
	}
	credit := st.consumeLocked(n)
	st.mu.Unlock()
	st.sendCredit(credit)
	return n, nil
}

// WriteTo writes what arrives to w until the peer's Close (nil) or a
// failure, each payload as it came: no copy into a caller's buffer (the
// agent's path to its destination). After it returns the caller closes
// both w's connection and the stream: a stream stays on its session
// until Close, whatever the peer did.
//
// A w that is a TryWriter is also written by the session's reader itself
// while nothing is queued (push): the count returned is then only what
// WriteTo wrote.
func (st *Stream) WriteTo(w io.Writer) (int64, error) {
	if tw, ok := w.(TryWriter); ok {
		st.mu.Lock()
		st.direct = tw
		st.mu.Unlock()
		defer func() {
			st.mu.Lock()
			st.direct = nil
			st.mu.Unlock()
		}()
	}
	var total int64
	for {
		st.mu.Lock()
		for len(st.recv) == 0 && !st.remote && !st.local && st.err == nil {
			st.cond.Wait()
		}
		if len(st.recv) == 0 || st.local {
			err := st.err
			if st.local {
				err = errClosed
			}
			st.mu.Unlock()
			return total, err
		}
		buf, off := st.recv[0], st.off
		st.recv[0] = nil
		st.recv, st.off = st.recv[1:], 0
		st.writing = true
		st.mu.Unlock()
		n, err := w.Write(buf[off:])
		total += int64(n)
		putBuf(buf)
		st.mu.Lock()
		st.writing = false
		if err != nil {
			// What followed buf must not reach w past the bytes lost.
			st.direct = nil
		}
		credit := st.consumeLocked(len(buf) - off)
		st.mu.Unlock()
		st.sendCredit(credit)
		if err != nil {
			return total, err
		}
	}
}

// consumeLocked counts n bytes read and returns the credit to send back:
// in batches of a quarter window, so a bulk transfer costs a credit frame
// per 256 KiB and an exchange of small messages (an exec's keystrokes, a
// kubelet's responses) one per 256 KiB too, not one per message: that
// was a frame, a TLS record and a system call on each side per message,
// a third of the link's work per round trip. It cannot leave the sender
// waiting: it waits only with no credit, when a whole window is unread or
// uncredited here or on its way, and a quarter of it read sends credit.
func (st *Stream) consumeLocked(n int) int {
	if st.local || st.err != nil {
		return 0 // Close dropped what was buffered; nothing to credit
	}
	st.buffered -= n
	st.consumed += n
	if st.consumed >= st.s.window/4 {
		c := st.consumed
		st.consumed = 0
		if st.remote || st.err != nil {
			return 0
		}
		return c
	}
	return 0
}

func (st *Stream) sendCredit(n int) {
	if n > 0 {
		_ = st.s.writeFrame(header{typ: frameCredit, id: st.id}, creditPayload(n))
	}
}

func creditPayload(n int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return b[:]
}

// Write sends p, waiting for credit: a peer that stops reading stops its
// writer here, and nobody else.
func (st *Stream) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		st.mu.Lock()
		for st.credit == 0 && !st.remote && !st.local && st.err == nil {
			st.cond.Wait()
		}
		switch {
		case st.err != nil:
			err := st.err
			st.mu.Unlock()
			return n, err
		case st.local:
			st.mu.Unlock()
			return n, errClosed
		case st.remote:
			st.mu.Unlock()
			return n, io.ErrClosedPipe
		}
		chunk := min(len(p)-n, st.credit, MaxPayload)
		st.credit -= chunk
		st.mu.Unlock()
		if err := st.s.writeFrame(header{typ: frameData, id: st.id}, p[n:n+chunk]); err != nil {
			return n, err
		}
		n += chunk
	}
	return n, nil
}

// ReadFrom sends what r gives until its EOF (nil) or a failure, read in
// MaxPayload pieces (the agent's path from its destination: a TCP
// connection's own WriteTo would read 32 KiB at a time).
func (st *Stream) ReadFrom(r io.Reader) (int64, error) {
	buf := getBuf(MaxPayload)
	defer putBuf(buf)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := st.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Close ends the connection both ways: the peer's reads end, what it had
// not read here is dropped.
func (st *Stream) Close() error {
	st.mu.Lock()
	if st.local {
		st.mu.Unlock()
		return nil
	}
	st.local = true
	st.freeRecv()
	remote, serr := st.remote, st.err
	st.cond.Broadcast()
	st.mu.Unlock()
	if serr != nil {
		return nil
	}
	err := st.s.writeFrame(header{typ: frameClose, id: st.id}, nil)
	if remote {
		st.finish()
	}
	return err
}
