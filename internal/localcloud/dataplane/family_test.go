package dataplane

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestSameFamily(t *testing.T) {
	be := func(s string) *backend { return &backend{addr: netip.MustParseAddr(s)} }
	a4, b4, a6, b6 := be("10.0.0.1"), be("10.0.0.2"), be("fd01::1"), be("fd01::2")
	for _, tc := range []struct {
		name  string
		ready []*backend
		vip4  bool
		want  []*backend
	}{
		{"none", nil, true, nil},
		{"IPv4 only, IPv4 VIP", []*backend{a4, b4}, true, []*backend{a4, b4}},
		{"IPv4 only, IPv6 VIP: falls back to all", []*backend{a4, b4}, false, []*backend{a4, b4}},
		{"IPv6 only, IPv4 VIP: falls back to all", []*backend{a6, b6}, true, []*backend{a6, b6}},
		{"dual, IPv4 VIP", []*backend{a4, b4, a6, b6}, true, []*backend{a4, b4}},
		{"dual, IPv6 VIP", []*backend{a4, b4, a6, b6}, false, []*backend{a6, b6}},
		{"one of each, IPv6 VIP", []*backend{a4, a6}, false, []*backend{a6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sameFamily(tc.ready, tc.vip4)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d backends, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("[%d] = %s, want %s", i, got[i].addr, tc.want[i].addr)
				}
			}
		})
	}
}

// TestListenersPreferBackendsOfTheirFamily: a dual-stack load balancer
// (a VIP of each family, each node's address of each family as backends)
// sends its IPv4 listener's connections to IPv4 backends and its IPv6
// listener's to IPv6 ones; with the IPv6 backend down, the IPv6 listener
// is served by the IPv4 one rather than refused.
func TestListenersPreferBackendsOfTheirFamily(t *testing.T) {
	p := fastPlane(t)
	six := netip.IPv6Loopback()
	v4ip, vip4 := randomLoopback(), randomLoopback()
	var v4, v6 *echoBackend
	var port int
	// A backend port and a listener port free on both loopbacks.
	for i := 0; ; i++ {
		v4 = startBackend(t, "v4", v4ip, 0)
		ln, err := net.Listen("tcp", netip.AddrPortFrom(six, uint16(v4.port())).String())
		if err == nil {
			_ = ln.Close()
			v6 = startBackend(t, "v6", six, v4.port())
			break
		}
		if i == 20 {
			t.Fatalf("no port free on both %s and %s: %v", v4ip, six, err)
		}
		_ = v4.ln.Close()
	}
	for i := 0; ; i++ {
		port = freePort(t, six)
		if ln, err := net.Listen("tcp", netip.AddrPortFrom(vip4, uint16(port)).String()); err == nil {
			_ = ln.Close()
			break
		}
		if i == 20 {
			t.Fatal("no listener port free on both families")
		}
	}
	cfg := Config{
		Name: "dual", VIPs: []netip.Addr{vip4, six},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: v4.port()}},
		Backends:  []api.Backend{{Name: "node-1", Address: v4ip.String()}, {Name: "node-1", Address: six.String()}},
	}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "both backends healthy", func() bool { return backendHealthy(p, "dual", v4ip) && backendHealthy(p, "dual", six) })
	for _, tc := range []struct {
		vip  netip.Addr
		want string
	}{{vip4, "v4"}, {six, "v6"}} {
		for range 10 {
			if got, err := ask(netip.AddrPortFrom(tc.vip, uint16(port)), netip.Addr{}); err != nil || got != tc.want {
				t.Fatalf("through %s: answered by %q (%v), want %q", tc.vip, got, err, tc.want)
			}
		}
	}
	_ = v6.ln.Close()
	waitFor(t, 3*time.Second, "the IPv6 backend unhealthy", func() bool { return !backendHealthy(p, "dual", six) })
	for range 5 {
		if got, err := ask(netip.AddrPortFrom(six, uint16(port)), netip.Addr{}); err != nil || got != "v4" {
			t.Fatalf("through %s with its family's backend down: answered by %q (%v), want v4", six, got, err)
		}
	}
}
