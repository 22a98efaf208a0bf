package link

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// pair is a session pair over a loopback TCP connection (as the agent's
// link runs, without TLS: the framing is under test).
func pair(t *testing.T, cfg Config) (dialer, acceptor *Session) { return pairCfg(t, cfg) }

func pairTB(b testing.TB) (*Session, *Session) { return pairCfg(b, Config{}) }

func pairCfg(t testing.TB, cfg Config) (dialer, acceptor *Session) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := <-got
	if !ok {
		t.Fatal("accept failed")
	}
	dialer, acceptor = Client(c, cfg), Server(sc, cfg)
	t.Cleanup(func() {
		_ = dialer.Close()
		_ = acceptor.Close()
	})
	return dialer, acceptor
}

// serveEcho accepts every dial on s and echoes, or refuses addresses
// starting with "refuse".
func serveEcho(t *testing.T, s *Session) {
	go func() {
		for {
			r, err := s.Accept(context.Background())
			if err != nil {
				return
			}
			if strings.HasPrefix(r.Address, "refuse") {
				r.Reject(fmt.Errorf("connection refused by %s", r.Address))
				continue
			}
			st, err := r.Accept()
			if err != nil {
				return
			}
			echo(st)
		}
	}()
}

type readerOnly struct{ io.Reader }

// acceptEach accepts every dial on s, in a goroutine of its own, and
// hands each stream to handle (in that goroutine: handle starts its own
// for long work).
func acceptEach(s *Session, handle func(*Stream)) {
	go func() {
		for {
			r, err := s.Accept(context.Background())
			if err != nil {
				return
			}
			st, err := r.Accept()
			if err != nil {
				return
			}
			handle(st)
		}
	}()
}

// echo copies what st receives back to it, then closes it.
func echo(st *Stream) {
	go func() {
		_, _ = io.Copy(st, readerOnly{st})
		_ = st.Close()
	}()
}

func TestEchoBothWays(t *testing.T) {
	d, a := pair(t, Config{})
	serveEcho(t, a)
	st, err := d.Dial(context.Background(), "tcp", "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	// More than the window, in odd-sized writes, read back concurrently.
	data := make([]byte, 8<<20+12345)
	_, _ = rand.Read(data)
	go func() {
		for off := 0; off < len(data); {
			n := min(100_003, len(data)-off)
			if _, err := st.Write(data[off : off+n]); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			off += n
		}
	}()
	back := make([]byte, len(data))
	if _, err := io.ReadFull(st, back); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(back) != sha256.Sum256(data) {
		t.Fatal("echoed bytes differ")
	}
	// A small exchange is not held back by credit batching.
	for i := range 100 {
		msg := []byte(fmt.Sprintf("ping %d", i))
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(st, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round trip %d: %q, %v", i, got, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both sides to drop the connection", func() bool { return d.NumStreams() == 0 && a.NumStreams() == 0 })
}

func TestDialRefusedAndAbandoned(t *testing.T) {
	d, a := pair(t, Config{})
	serveEcho(t, a)
	if _, err := d.Dial(context.Background(), "tcp", "refuse:1"); err == nil || !strings.Contains(err.Error(), "connection refused by refuse:1") {
		t.Fatalf("refused dial: %v", err)
	}
	// A dial the agent never answers, abandoned at the deadline: the
	// agent sees it canceled, refuses it, and both forget it.
	d2, a2 := pair(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := d2.Dial(ctx, "tcp", "slow:1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned dial: %v", err)
	}
	r, err := a2.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent to see the dial canceled", r.Canceled)
	r.Reject(errors.New("canceled"))
	waitFor(t, "both sides to forget the dial", func() bool { return d.NumStreams() == 0 && d2.NumStreams() == 0 && a2.NumStreams() == 0 })
	// Only the dialing side dials.
	if _, err := a.Dial(context.Background(), "tcp", "x:1"); err == nil {
		t.Fatal("the accepting side dialed")
	}
}

// TestStalledConnectionHoldsOnlyItsWindow: one connection whose reader
// stops has its writer stopped after the window, and another connection
// on the same link moves its bytes meanwhile.
func TestStalledConnectionHoldsOnlyItsWindow(t *testing.T) {
	const window = 256 << 10
	d, a := pair(t, Config{Window: window})
	accepted := make(chan *Stream, 2)
	acceptEach(a, func(st *Stream) { accepted <- st })
	stalled, err := d.Dial(context.Background(), "tcp", "stalled:1")
	if err != nil {
		t.Fatal(err)
	}
	stalledPeer := <-accepted
	var written int64
	var mu sync.Mutex
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			n, err := stalled.Write(chunk)
			mu.Lock()
			written += int64(n)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	held := written
	mu.Unlock()
	if held > window {
		t.Fatalf("the stalled connection's writer got %d bytes out, over its window of %d", held, window)
	}
	if held < window/2 {
		t.Fatalf("the stalled connection's writer got only %d bytes out of its window of %d", held, window)
	}
	other, err := d.Dial(context.Background(), "tcp", "other:1")
	if err != nil {
		t.Fatal(err)
	}
	otherPeer := <-accepted
	const size = 16 << 20
	go func() { _, _ = other.Write(make([]byte, size)) }()
	done := make(chan int64, 1)
	go func() {
		n, _ := io.CopyN(io.Discard, otherPeer, size)
		done <- n
	}()
	select {
	case n := <-done:
		if n != size {
			t.Fatalf("the other connection moved %d of %d bytes", n, size)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the other connection was held up by the stalled one")
	}
	// The stalled one resumes when read.
	if _, err := io.CopyN(io.Discard, stalledPeer, held+1); err != nil {
		t.Fatalf("the stalled connection did not resume: %v", err)
	}
	_ = stalled.Close()
}

func TestSessionEndFailsEverything(t *testing.T) {
	d, a := pair(t, Config{})
	serveEcho(t, a)
	st, err := d.Dial(context.Background(), "tcp", "x:1")
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 10))
		readErr <- err
	}()
	_ = a.Close()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("read succeeded on a dead link")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read on a dead link did not end")
	}
	<-d.Done()
	// Nothing is reported sent on a dead link.
	if _, err := st.Write([]byte("x")); err == nil {
		t.Fatal("a write on a dead link succeeded")
	}
	if err := d.GoAway(); err == nil {
		t.Fatal("GoAway on a dead link succeeded")
	}
	if _, err := d.Dial(context.Background(), "tcp", "x:1"); err == nil {
		t.Fatal("dialed on a dead link")
	}
	if _, err := a.Accept(context.Background()); err == nil {
		t.Fatal("accepted on a dead link")
	}
	if d.NumStreams() != 0 {
		t.Fatalf("%d streams kept after the end", d.NumStreams())
	}
}

func TestPingAndGoAway(t *testing.T) {
	d, a := pair(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.GoAway(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the GoAway", d.PeerGoneAway)
	// Still served: the dialing side decides whether to choose it.
	serveEcho(t, a)
	st, err := d.Dial(ctx, "tcp", "x:1")
	if err != nil {
		t.Fatalf("dial to a draining agent: %v", err)
	}
	_ = st.Close()
}

func dialFrame(id uint64) []byte {
	p, _ := dialPayload(1<<20, "tcp", "x")
	return append(appendHeader(nil, header{typ: frameDial, length: uint32(len(p)), id: id}), p...)
}

func dataFrame(id uint64, n int) []byte {
	return append(appendHeader(nil, header{typ: frameData, length: uint32(n), id: id}), make([]byte, n)...)
}

// TestProtocolErrors: a peer that breaks the protocol ends the session
// with an error naming what it did.
func TestProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before is sent first; after once the dial (if any) is accepted.
		before, after []byte
		want          string
	}{
		{"oversized data", appendHeader(nil, header{typ: frameData, length: MaxPayload + 1, id: 1}), nil, "over the 262144 allowed"},
		{"data over its credit", dialFrame(1), bytes.Repeat(dataFrame(1, MaxPayload), 3), "over its credit"},
		{"data before the dial is answered", append(dialFrame(1), dataFrame(1, 10)...), nil, "before its dial was answered"},
		{"an empty data frame", dialFrame(1), appendHeader(nil, header{typ: frameData, id: 1}), "empty data frame"},
		{"credit beyond the window", dialFrame(1), append(appendHeader(nil, header{typ: frameCredit, length: 4, id: 1}), 0xff, 0xff, 0xff, 0xff), "over its window"},
		{"a dial reusing an ID", append(dialFrame(1), dialFrame(1)...), nil, "in use or was"},
		{"a dial answer to the accepting side", append(appendHeader(nil, header{typ: frameDialOK, length: 4, id: 1}), 0, 1, 0, 0), nil, "the dialing side answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2 := net.Pipe()
			s := Server(c2, Config{Window: 512 << 10})
			defer func() { _ = s.Close() }()
			go func() { _, _ = io.Copy(io.Discard, c1) }()
			go func() {
				_, _ = c1.Write(tc.before)
				if tc.after == nil {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if r, err := s.Accept(ctx); err == nil {
					_, _ = r.Accept()
				}
				_, _ = c1.Write(tc.after)
			}()
			select {
			case <-s.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the session did not end")
			}
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			_ = c1.Close()
		})
	}
}

// TestSmallWritesHoldOnlyTheWindow: many one-byte frames to a reader that
// has stopped are held in about the window, not a pooled buffer each.
func TestSmallWritesHoldOnlyTheWindow(t *testing.T) {
	const window = 64 << 10
	d, a := pair(t, Config{Window: window})
	accepted := make(chan *Stream, 1)
	acceptEach(a, func(st *Stream) { accepted <- st })
	st, err := d.Dial(context.Background(), "tcp", "x:1")
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	go func() {
		for {
			if _, err := st.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	waitFor(t, "the window to fill", func() bool {
		peer.mu.Lock()
		defer peer.mu.Unlock()
		return peer.buffered == window
	})
	peer.mu.Lock()
	held := 0
	for _, b := range peer.recv {
		held += cap(b)
	}
	peer.mu.Unlock()
	if held > 2*window {
		t.Fatalf("%d bytes held for a window of %d", held, window)
	}
	_ = st.Close()
}

// TestWindowsDiffer: each side's window is its own; a link between a
// side with 1 MiB and one with 64 KiB carries a stalled connection and
// bulk without a protocol error.
func TestWindowsDiffer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		serveEcho(t, Server(c, Config{Window: 64 << 10}))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	d := Client(c, Config{Window: 1 << 20})
	defer func() { _ = d.Close() }()
	st, err := d.Dial(context.Background(), "tcp", "x:1")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4<<20)
	_, _ = rand.Read(data)
	go func() { _, _ = st.Write(data) }()
	back := make([]byte, len(data))
	if _, err := io.ReadFull(st, back); err != nil {
		t.Fatalf("%v (session: %v)", err, d.Err())
	}
	if !bytes.Equal(back, data) {
		t.Fatal("echo differs")
	}
}

// TestNoLeaks: many connections opened and closed every way leave no
// stream and no goroutine behind.
func TestNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	d, a := pair(t, Config{})
	serveEcho(t, a)
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			addr := "x:1"
			if i%4 == 3 {
				addr = "refuse:1"
			}
			st, err := d.Dial(context.Background(), "tcp", addr)
			if err != nil {
				return
			}
			if i%4 == 1 {
				_ = st.Close() // without a byte
				return
			}
			_, _ = st.Write([]byte("hello"))
			buf := make([]byte, 5)
			_, _ = io.ReadFull(st, buf)
			_ = st.Close()
		})
	}
	wg.Wait()
	waitFor(t, "every connection gone from both sides", func() bool { return d.NumStreams() == 0 && a.NumStreams() == 0 })
	_ = d.Close()
	_ = a.Close()
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before+2 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Dials from many goroutines at once reach the peer with their IDs in
// order (the peer refuses an ID not above the last one, ending the
// session): found by the proxy's leak test, 16 frontends dialing at once.
func TestConcurrentDials(t *testing.T) {
	d, a := pair(t, Config{})
	serveEcho(t, a)
	var wg sync.WaitGroup
	errs := make(chan error, 64*20)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				st, err := d.Dial(context.Background(), "tcp", "10.0.0.1:80")
				if err != nil {
					errs <- err
					return
				}
				_ = st.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := d.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}
