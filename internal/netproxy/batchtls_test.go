package netproxy_test

import (
	"bytes"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc/credentials"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
)

// BatchTLS carries bytes both ways unchanged, in large writes too.
func TestBatchTLS(t *testing.T) {
	pki := netproxytest.NewPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		conn, _, err := netproxy.BatchTLS(credentials.NewTLS(pki.ServerTLS(t))).ServerHandshake(raw)
		if err != nil {
			errc <- err
			return
		}
		defer conn.Close()
		_, err = io.Copy(conn, conn) // echo
		errc <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ccfg := pki.ClientTLS(t, "agent")
	conn, _, err := netproxy.BatchTLS(credentials.NewTLS(ccfg)).ClientHandshake(t.Context(), "127.0.0.1", raw)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 50_000) // 800 kB: many records per Write
	go func() { _, _ = conn.Write(want) }()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("echoed bytes differ")
	}
	_ = conn.Close()
	<-errc
}
