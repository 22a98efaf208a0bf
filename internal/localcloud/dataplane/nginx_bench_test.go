package dataplane

import (
	"net"
	"net/netip"
	"testing"
)

// The benchmarks run nginx's stream proxy in front of the same backend as
// Portside's data plane (internal/nginxtest), on an address of this:
// freeLoopbackPort is a random loopback address with a port that was free
// a moment ago (bound, then closed).
func freeLoopbackPort(tb testing.TB) string {
	ip := randomLoopback()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
