package link

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Config sizes a session. Zero values take the defaults.
type Config struct {
	// Window is each connection's receive window in bytes: what the peer
	// may send unacknowledged, and so what one stalled connection holds
	// here (default 1 MiB, as the gRPC link's stream window; MinWindow to
	// MaxWindow). Each side tells the other its own.
	Window int
	// MaxPendingDials bounds dials the accepting side has not taken yet;
	// beyond it a dial is refused at once (default 1024).
	MaxPendingDials int
}

// ErrSessionClosed is returned once a session is over without a cause
// of its own (Close).
var ErrSessionClosed = errors.New("portside-link: session closed")

// Session is one link: over a net.Conn (the agent's mTLS connection),
// the dialing side (the proxy server, Dial) and the accepting side (the
// agent, Accept). One goroutine reads; writers write through.
type Session struct {
	conn    net.Conn
	br      *bufio.Reader
	dialing bool // this side dials (server); the other accepts (agent)
	window  int

	// The write path: frames are appended to wbuf; a writer that finds no
	// flush in progress writes the buffer itself (one Write per batch:
	// give the session a connection whose Write is one write(2), like
	// netproxy.BatchTLS's). The reader never writes itself: it kicks the
	// flusher goroutine, so two peers' readers cannot block on each other.
	wmu      sync.Mutex
	wbuf     []byte
	spare    []byte
	flushing bool
	werr     error
	wcond    *sync.Cond // senders waiting for wbuf to drain below highWater
	kick     chan struct{}

	dialMu   sync.Mutex // orders dial IDs on the wire
	mu       sync.Mutex
	streams  map[uint64]*Stream
	nextID   uint64
	pings    map[uint64]chan struct{}
	pingSeq  uint64
	err      error
	peerAway atomic.Bool

	accept chan *Request
	done   chan struct{}
}

// Client starts the dialing side of a session on conn.
func Client(conn net.Conn, cfg Config) *Session { return newSession(conn, cfg, true) }

// Server starts the accepting side of a session on conn.
func Server(conn net.Conn, cfg Config) *Session { return newSession(conn, cfg, false) }

func newSession(conn net.Conn, cfg Config, dialing bool) *Session {
	if cfg.Window <= 0 {
		cfg.Window = 1 << 20
	}
	cfg.Window = min(max(cfg.Window, MinWindow), MaxWindow)
	if cfg.MaxPendingDials <= 0 {
		cfg.MaxPendingDials = 1024
	}
	s := &Session{
		conn: conn, br: bufio.NewReaderSize(conn, 64<<10), dialing: dialing, window: cfg.Window,
		kick: make(chan struct{}, 1), streams: map[uint64]*Stream{}, pings: map[uint64]chan struct{}{},
		accept: make(chan *Request, cfg.MaxPendingDials), done: make(chan struct{}),
	}
	s.wcond = sync.NewCond(&s.wmu)
	go s.readLoop()
	go s.flushLoop()
	return s
}

// Done is closed when the session is over; Err says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended (nil while it runs).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session and every connection on it.
func (s *Session) Close() error {
	s.fail(ErrSessionClosed)
	return nil
}

// NumStreams is the connections the session holds (open or half-closed).
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// GoAway tells the peer this side takes no new dials (an agent draining).
func (s *Session) GoAway() error { return s.writeFrame(header{typ: frameGoAway}, nil) }

// PeerGoneAway reports whether the peer sent GoAway.
func (s *Session) PeerGoneAway() bool { return s.peerAway.Load() }

// Ping sends a ping and waits for its pong.
func (s *Session) Ping(ctx context.Context) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	s.pingSeq++
	token, ch := s.pingSeq, make(chan struct{})
	s.pings[token] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pings, token)
		s.mu.Unlock()
	}()
	if err := s.writeFrame(header{typ: framePing, length: 8}, binary.BigEndian.AppendUint64(nil, token)); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-s.done:
		return s.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fail ends the session once: the connection closed, every stream and
// waiter failed with err.
func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	streams := s.streams
	s.streams = map[uint64]*Stream{}
	s.mu.Unlock()
	s.wmu.Lock()
	if s.werr == nil {
		s.werr = err
	}
	s.wcond.Broadcast()
	s.wmu.Unlock()
	_ = s.conn.Close()
	for _, st := range streams {
		st.abort(err)
	}
	close(s.done)
}

// Write-queue bounds. Senders wait while more than highWater bytes are
// queued (the link is slower than they are); the reader's own replies
// (pongs, refusals) never wait, and a peer that makes them pile up past
// maxBacklog without reading is failed.
const (
	highWater  = 4 << 20
	maxBacklog = 16 << 20
)

// writeFrame queues a frame and, unless another writer is flushing,
// writes the queue out.
func (s *Session) writeFrame(h header, payload []byte) error {
	flush, err := s.queue(h, payload, false)
	if err != nil || !flush {
		return err
	}
	return s.flush(false)
}

// writeFrameAsync queues a frame for the flusher goroutine: for the
// reader, which must never block on the connection.
func (s *Session) writeFrameAsync(h header, payload []byte) error {
	flush, err := s.queue(h, payload, true)
	if err != nil {
		return err
	}
	if flush {
		// The flush is the flusher goroutine's now. Only this hands the
		// flush over, and only while holding it, so the kick never finds
		// the channel full.
		s.kick <- struct{}{}
	}
	return nil
}

// queue appends a frame; true when the caller is to flush. An error once
// the link failed: nothing is reported sent that was not.
func (s *Session) queue(h header, payload []byte, async bool) (bool, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for !async && s.werr == nil && s.flushing && len(s.wbuf) > highWater {
		s.wcond.Wait()
	}
	if s.werr != nil {
		return false, s.werr
	}
	if async && len(s.wbuf) > maxBacklog {
		return false, fmt.Errorf("portside-link: over %d bytes of replies queued: the peer does not read its link", maxBacklog)
	}
	h.length = uint32(len(payload))
	s.wbuf = appendHeader(s.wbuf, h)
	s.wbuf = append(s.wbuf, payload...)
	if s.flushing {
		return false, nil
	}
	s.flushing = true
	return true, nil
}

// flush writes the queue out while it holds the flush. A sender (not the
// flusher goroutine) writes one round, what was queued when it came, and
// gives the rest to the flusher goroutine, so a busy link does not keep
// one connection's writer writing everybody else's frames.
func (s *Session) flush(flusher bool) error {
	s.wmu.Lock()
	for rounds := 0; len(s.wbuf) > 0 && s.werr == nil; rounds++ {
		if rounds == 1 && !flusher {
			s.wmu.Unlock()
			s.kick <- struct{}{}
			return nil
		}
		buf := s.wbuf
		s.wbuf = s.spare[:0]
		s.wmu.Unlock()
		_, err := s.conn.Write(buf)
		s.wmu.Lock()
		if cap(buf) <= 4*MaxPayload {
			s.spare = buf[:0] // an unusual burst's buffer is not kept
		} else {
			s.spare = nil
		}
		if err != nil && s.werr == nil {
			s.werr = err
		}
		s.wcond.Broadcast()
	}
	s.flushing = false
	err := s.werr
	s.wmu.Unlock()
	if err != nil {
		s.fail(fmt.Errorf("portside-link: write: %w", err))
	}
	return err
}

func (s *Session) flushLoop() {
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
			_ = s.flush(true)
		}
	}
}

func (s *Session) readLoop() {
	var hb [HeaderSize]byte
	for {
		if _, err := io.ReadFull(s.br, hb[:]); err != nil {
			s.fail(readErr(err))
			return
		}
		select {
		case <-s.done:
			return // failed meanwhile: what was buffered is not acted on
		default:
		}
		h, err := parseHeader(hb[:])
		if err == nil {
			err = s.handle(h)
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return ErrSessionClosed
	}
	return fmt.Errorf("portside-link: read: %w", err)
}

// handle takes one frame whose header has been read.
func (s *Session) handle(h header) error {
	if h.typ == frameData {
		st := s.stream(h.id)
		if st == nil {
			// Closed here already: what was in flight is dropped.
			_, err := s.br.Discard(int(h.length))
			return err
		}
		buf := getBuf(int(h.length))
		if _, err := io.ReadFull(s.br, buf); err != nil {
			putBuf(buf)
			return readErr(err)
		}
		return st.push(buf)
	}
	payload := make([]byte, h.length)
	if _, err := io.ReadFull(s.br, payload); err != nil {
		return readErr(err)
	}
	switch h.typ {
	case frameCredit:
		if st := s.stream(h.id); st != nil {
			return st.addCredit(binary.BigEndian.Uint32(payload))
		}
	case frameClose:
		if st := s.stream(h.id); st != nil {
			st.remoteClose()
		}
	case frameDial:
		return s.handleDial(h.id, payload)
	case frameDialOK, frameDialErr:
		if !s.dialing {
			return errors.New("portside-link: the dialing side answered a dial")
		}
		if st := s.stream(h.id); st != nil {
			return st.dialAnswer(h.typ == frameDialOK, payload)
		}
	case framePing:
		return s.writeFrameAsync(header{typ: framePong}, payload)
	case framePong:
		token := binary.BigEndian.Uint64(payload)
		s.mu.Lock()
		if ch := s.pings[token]; ch != nil {
			close(ch)
			delete(s.pings, token)
		}
		s.mu.Unlock()
	case frameGoAway:
		s.peerAway.Store(true)
	}
	return nil
}

func (s *Session) stream(id uint64) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

func (s *Session) remove(id uint64) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}
