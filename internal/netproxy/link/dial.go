package link

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Dial asks the accepting side to open network/address and waits for its
// answer. On ctx's end the dial is abandoned (the peer closes what it
// opened late).
func (s *Session) Dial(ctx context.Context, network, address string) (*Stream, error) {
	if !s.dialing {
		return nil, errors.New("portside-link: only the dialing side dials")
	}
	// A peer that went away still takes dials: the server chooses a
	// draining agent only when no other may serve the address (a rolling
	// update of a node's one agent), and the agent serves them, as a
	// draining gRPC agent does.
	payload, err := dialPayload(s.window, network, address)
	if err != nil {
		return nil, err
	}
	// IDs must reach the peer in order (it refuses one not above the
	// last, so a reused ID cannot be mistaken for a new connection): the
	// ID is taken and its frame queued under dialMu.
	s.dialMu.Lock()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		s.dialMu.Unlock()
		return nil, s.err
	}
	s.nextID++
	st := newStream(s, s.nextID)
	s.streams[st.id] = st
	s.mu.Unlock()
	err = s.writeFrame(header{typ: frameDial, id: st.id}, payload)
	s.dialMu.Unlock()
	if err != nil {
		s.remove(st.id)
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() {
		st.mu.Lock()
		st.cond.Broadcast()
		st.mu.Unlock()
	})
	defer stop()
	st.mu.Lock()
	for st.dialed == 0 && st.err == nil && !st.remote && ctx.Err() == nil {
		st.cond.Wait()
	}
	dialed, dialErr, serr := st.dialed, st.dialErr, st.err
	st.mu.Unlock()
	switch {
	case dialed == 1:
		return st, nil
	case dialed == -1:
		st.finish()
		return nil, &DialError{Network: network, Address: address, Reason: dialErr}
	case serr != nil:
		return nil, serr
	}
	_ = st.Close() // abandoned: the peer closes what it opens
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", network, address, err)
	}
	return nil, fmt.Errorf("dial %s %s: closed by the agent", network, address)
}

// DialError is the accepting side's refusal of a dial; Reason is its text
// (the agent's dial error, which the server hands the frontend as an
// upstream agent's DIAL_RSP error would be).
type DialError struct{ Network, Address, Reason string }

func (e *DialError) Error() string {
	return fmt.Sprintf("dial %s %s: %s", e.Network, e.Address, e.Reason)
}

// Request is a dial the accepting side has not answered yet.
type Request struct {
	Network, Address string
	st               *Stream
	answered         bool
}

// Accept waits for the next dial; an error when the session is over.
func (s *Session) Accept(ctx context.Context) (*Request, error) {
	select {
	case r := <-s.accept:
		return r, nil
	case <-s.done:
		return nil, s.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Session) handleDial(id uint64, payload []byte) error {
	if s.dialing {
		return errors.New("portside-link: the accepting side sent a dial")
	}
	window, network, address, err := parseDial(payload)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	if s.streams[id] != nil || id <= s.nextID {
		s.mu.Unlock()
		return fmt.Errorf("portside-link: dial for connection %d, which is in use or was", id)
	}
	s.nextID = id
	st := newStream(s, id)
	st.credit, st.peerWindow = window, window
	s.streams[id] = st
	s.mu.Unlock()
	select {
	case s.accept <- &Request{Network: network, Address: address, st: st}:
		return nil
	default:
		s.remove(id)
		return s.writeFrameAsync(header{typ: frameDialErr, id: id}, []byte("agent busy: too many dials pending"))
	}
}

// Canceled reports whether the dialing side gave up on the dial (or the
// session ended): an agent stops dialing and answers with Reject.
func (r *Request) Canceled() bool {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	return r.st.remote || r.st.err != nil
}

// Accept answers the dial as made: the stream is the connection's.
func (r *Request) Accept() (*Stream, error) {
	if r.answered {
		return nil, errors.New("portside-link: dial answered twice")
	}
	r.answered = true
	r.st.mu.Lock()
	r.st.accepted = true
	r.st.mu.Unlock()
	var w [4]byte
	binary.BigEndian.PutUint32(w[:], uint32(r.st.s.window))
	if err := r.st.s.writeFrame(header{typ: frameDialOK, id: r.st.id}, w[:]); err != nil {
		return nil, err
	}
	return r.st, nil
}

// Reject answers the dial as failed, with err's text.
func (r *Request) Reject(err error) {
	if r.answered {
		return
	}
	r.answered = true
	r.st.mu.Lock()
	r.st.local = true
	r.st.mu.Unlock()
	r.st.finish()
	_ = r.st.s.writeFrame(header{typ: frameDialErr, id: r.st.id}, []byte(err.Error()))
}

// dialAnswer is the accepting side's answer. A refusal ends the stream on
// that side (it sends nothing more), so a dial abandoned here and refused
// there is gone from both.
func (st *Stream) dialAnswer(ok bool, payload []byte) error {
	var window uint32
	if ok {
		window = binary.BigEndian.Uint32(payload)
		if err := checkWindow(window); err != nil {
			return err
		}
	}
	st.mu.Lock()
	if st.dialed != 0 {
		st.mu.Unlock()
		return fmt.Errorf("portside-link: dial %d answered twice", st.id)
	}
	st.dialed, st.dialErr = -1, string(payload)
	if ok {
		st.dialed, st.accepted = 1, true
		st.credit, st.peerWindow = int(window), int(window)
	}
	if !ok {
		st.remote = true
	}
	done := !ok && st.local
	st.cond.Broadcast()
	st.mu.Unlock()
	if done {
		st.finish()
	}
	return nil
}
