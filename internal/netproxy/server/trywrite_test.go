package server

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/nettest"
)

// tryPair is a TLS connection whose server side writes through a
// tryConn, as an HTTP-CONNECT client's does, and its client side.
func tryPair(t *testing.T) (srv *tls.Conn, tc *tryConn, cli *tls.Conn) {
	t.Helper()
	cert, pool := nettest.SelfSigned(t, "proxy-server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := tryListener{ln}.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	dialed := make(chan error, 1)
	go func() {
		var err error
		cli, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
		dialed <- err
	}()
	raw := <-accepted
	tc, ok := raw.(*tryConn)
	if !ok {
		t.Fatalf("accepted a %T, want a *tryConn", raw)
	}
	srv = tls.Server(tc, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(); _ = cli.Close() })
	if tryConnOf(srv) != tc {
		t.Fatal("tryConnOf does not find the tryConn under the TLS connection")
	}
	return srv, tc, cli
}

// TestTryWriteNeverWaits: with a client that reads nothing, a try write
// returns at once, whole (the rest stashed for the flusher), and the next
// is refused while the flusher waits; once the client reads, every byte
// arrives in order, TLS records intact.
func TestTryWriteNeverWaits(t *testing.T) {
	srv, tc, cli := tryPair(t)
	payload := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	var want []byte
	// Fill the socket: try writes until one is refused (the flusher is
	// then holding what the socket did not take).
	refused := false
	for i := 0; i < 1000 && !refused; i++ {
		p := payload(256<<10, byte('a'+i%26))
		done := make(chan bool, 1)
		go func() { done <- tc.tryWrite(srv, p) }()
		select {
		case ok := <-done:
			if ok {
				want = append(want, p...)
			} else {
				refused = true
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a try write waited for the socket")
		}
	}
	if !refused {
		t.Fatal("250 MiB taken without the client reading: the socket never filled")
	}
	// A waiting write goes after the flusher's bytes.
	last := payload(1000, 'Z')
	wrote := make(chan error, 1)
	go func() { _, err := srv.Write(last); wrote <- err }()
	want = append(want, last...)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(cli, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes out of order or damaged")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	// Idle again: a try write goes straight to the socket.
	if !tc.tryWrite(srv, []byte("x")) {
		t.Fatal("a try write on an idle connection was refused")
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(cli, one); err != nil || one[0] != 'x' {
		t.Fatalf("read %q, %v", one, err)
	}
}

// TestTryWriteFlusherEndsOnClose: a flusher waiting on a client that
// never reads ends when the connection is closed, and later writes fail.
func TestTryWriteFlusherEndsOnClose(t *testing.T) {
	srv, tc, _ := tryPair(t)
	p := bytes.Repeat([]byte{1}, 1<<20)
	for i := 0; i < 1000; i++ {
		if !tc.tryWrite(srv, p) {
			break
		}
	}
	tc.mu.Lock()
	flushing := tc.flushing
	tc.mu.Unlock()
	if !flushing {
		t.Fatal("no flusher after the socket filled")
	}
	_ = tc.Conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tc.mu.Lock()
		flushing, err := tc.flushing, tc.err
		tc.mu.Unlock()
		if !flushing && err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flusher did not end after the connection closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := tc.Write([]byte("late")); err == nil {
		t.Fatal("a write after the flusher failed succeeded")
	}
}
