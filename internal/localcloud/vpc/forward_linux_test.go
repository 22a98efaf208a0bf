package vpc_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
)

// TestForwardedVIP: the router's kernel path for a proxied load balancer.
// A VIP's port is rewritten to the machines' backend port (round robin, or
// by the client with affinity), from the host and from a machine (to
// itself too: the source rewrite brings the reply back through the
// router); the backend sees the host's own address, and a machine's
// flows come from the router's uplink address, outside the machines'
// network;
// what the rules do not cover (a client outside the source ranges, a VIP
// no longer forwarded) reaches the router's own listener; a flow kept to
// a removed backend goes on until EndFlows ends it; IPv6 alike.
func TestForwardedVIP(t *testing.T) {
	vpctest.RequireRoot(t)
	nw, r := vpctest.StartDual(t)
	id := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(nw.RouterNetns(), "/run/netns/"), "ps"), "-router")
	router := strings.TrimPrefix(nw.RouterNetns(), "/run/netns/")
	m1, m2 := machineNetns(t, id, 1), machineNetns(t, id, 2)
	a1, a2 := r.Subnet.Addr().Next().Next(), r.Subnet.Addr().Next().Next().Next()
	b1 := r.Subnet6.Addr().Next().Next()
	if err := nw.Attach(1, m1, a1); err != nil {
		t.Fatal(err)
	}
	if err := nw.Attach(2, m2, a2); err != nil {
		t.Fatal(err)
	}
	if err := nw.Attach6(m1, b1); err != nil {
		t.Fatal(err)
	}
	const bport = 30080
	whoIn(t, m1, netip.AddrPortFrom(a1, bport), "m1")
	whoIn(t, m2, netip.AddrPortFrom(a2, bport), "m2")
	whoIn(t, m1, netip.AddrPortFrom(b1, bport), "m1")
	vip, vip6 := r.VIPs.Addr().Next().Next(), r.VIPs6.Addr().Next().Next()
	at, at6 := netip.AddrPortFrom(vip, 80), netip.AddrPortFrom(vip6, 80)
	// The data plane's listener, in the router: what is not forwarded.
	whoIn(t, router, at, "userspace")
	whoIn(t, router, at6, "userspace")
	if got := who(t, "", at); got.name != "userspace" {
		t.Fatalf("before forwarding: %v answered, want the router's listener", got)
	}

	backends := []netip.AddrPort{netip.AddrPortFrom(a1, bport), netip.AddrPortFrom(a2, bport)}
	fwd := vpc.ForwardedVIP{VIP: vip, Ports: []vpc.ForwardedPort{{Protocol: "TCP", Port: 80, Backends: backends}}}
	if err := nw.SetForwardedVIP(fwd); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"", m1} {
		seen := map[string]int{}
		for range 6 {
			got := who(t, from, at)
			seen[got.name]++
			// The host keeps its address; a machine gets the router's
			// uplink address (it may be sent to itself).
			want := nw.HostAddr()
			if from != "" {
				want = nw.RouterAddr()
			}
			if got.peer != want || r.Subnet.Contains(got.peer) {
				t.Errorf("from %q: the backend saw %v, want %v (outside the machines' %v)", from, got.peer, want, r.Subnet)
			}
		}
		if seen["m1"] == 0 || seen["m2"] == 0 || seen["userspace"] != 0 {
			t.Errorf("from %q: answers %v, want both machines (round robin) and never the router's listener", from, seen)
		}
	}

	// Affinity: one client, one backend.
	fwd.Affinity = true
	if err := nw.SetForwardedVIP(fwd); err != nil {
		t.Fatal(err)
	}
	first := who(t, "", at).name
	for range 5 {
		if got := who(t, "", at).name; got != first {
			t.Fatalf("with affinity the host reached %s, then %s", first, got)
		}
	}
	fwd.Affinity = false

	// A source range without the host: the host falls through to the
	// listener (which enforces the ranges), a machine inside is forwarded.
	fwd.Sources = []netip.Prefix{r.Subnet}
	if err := nw.SetForwardedVIP(fwd); err != nil {
		t.Fatal(err)
	}
	if got := who(t, "", at); got.name != "userspace" {
		t.Errorf("host outside the source ranges reached %v, want the router's listener", got)
	}
	if got := who(t, m2, at); got.name == "userspace" {
		t.Errorf("machine inside the source ranges reached the router's listener, want a backend")
	}
	fwd.Sources = nil

	// A removed backend's flow goes on (conntrack) until EndFlows.
	fwd.Ports[0].Backends = backends[:1]
	if err := nw.SetForwardedVIP(fwd); err != nil {
		t.Fatal(err)
	}
	c, err := dialFrom("", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "m1 ") {
		t.Fatalf("kept connection: %q, %v; want m1", line, err)
	}
	fwd.Ports[0].Backends = backends[1:]
	if err := nw.SetForwardedVIP(fwd); err != nil {
		t.Fatal(err)
	}
	echoLine(t, c, br, "still m1")
	if got := who(t, "", at); got.name != "m2" {
		t.Errorf("new flow after the change reached %v, want m2", got)
	}
	if n, err := nw.EndFlows(vpc.FlowFilter{VIP: vip, Backend: a2}); err != nil || n == 0 {
		// m2's flows are closed already (each answer closes): only
		// TIME_WAIT-like entries; what matters is m1's below.
		t.Logf("EndFlows(m2) = %d, %v", n, err)
	}
	echoLine(t, c, br, "m2's flows ended, not m1's")
	n, err := nw.EndFlows(vpc.FlowFilter{VIP: vip, Protocol: "TCP", Port: 80, Backend: a1, BackendPort: bport})
	if err != nil || n < 1 {
		t.Fatalf("EndFlows(m1) = %d, %v; want the kept flow ended", n, err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = fmt.Fprintf(c, "after\n")
	if line, err := br.ReadString('\n'); err == nil {
		t.Errorf("the ended flow still answered %q", line)
	}

	// No longer forwarded: the listener again.
	if err := nw.DeleteForwardedVIP(vip); err != nil {
		t.Fatal(err)
	}
	if got := who(t, "", at); got.name != "userspace" {
		t.Errorf("after DeleteForwardedVIP %v answered, want the router's listener", got)
	}

	// IPv6.
	if err := nw.SetForwardedVIP(vpc.ForwardedVIP{VIP: vip6, Ports: []vpc.ForwardedPort{{Protocol: "tcp", Port: 80,
		Backends: []netip.AddrPort{netip.AddrPortFrom(b1, bport)}}}}); err != nil {
		t.Fatal(err)
	}
	if got := who(t, "", at6); got.name != "m1" || got.peer != nw.HostAddr6() {
		t.Errorf("IPv6 VIP from the host: %v, want m1 seeing the host's own %v", got, nw.HostAddr6())
	}
	if got := who(t, m2, at); got.name != "userspace" {
		t.Errorf("IPv4 VIP after its deletion: %v", got)
	}

	// Only machines of the VPC, only the router's VIPs.
	if err := nw.SetForwardedVIP(vpc.ForwardedVIP{VIP: vip, Ports: []vpc.ForwardedPort{{Protocol: "TCP", Port: 80,
		Backends: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.7:80")}}}}); !errors.Is(err, vpc.ErrNotForwardable) {
		t.Errorf("SetForwardedVIP with a backend outside the VPC: %v, want ErrNotForwardable", err)
	}
	if err := nw.SetForwardedVIP(vpc.ForwardedVIP{VIP: a1, Ports: fwd.Ports}); !errors.Is(err, vpc.ErrNotForwardable) {
		t.Errorf("SetForwardedVIP with a machine's address as a VIP: %v, want ErrNotForwardable", err)
	}
}

type answer struct {
	name string
	peer netip.Addr
}

// whoIn serves at, in netns: each connection is told "<name> <its peer>"
// and then echoed.
func whoIn(t *testing.T, netns string, at netip.AddrPort, name string) {
	t.Helper()
	l, err := vpc.ListenIn(vpc.NetnsPath(netns), "tcp", at.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				if _, err := fmt.Fprintf(c, "%s %s\n", name, peer); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

func who(t *testing.T, from string, to netip.AddrPort) answer {
	t.Helper()
	c, err := dialFrom(from, to)
	if err != nil {
		t.Fatalf("from %q to %v: %v", from, to, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("from %q to %v: %v", from, to, err)
	}
	name, peer, _ := strings.Cut(strings.TrimSpace(line), " ")
	a, err := netip.ParseAddr(peer)
	if err != nil {
		t.Fatalf("from %q to %v: answer %q", from, to, line)
	}
	return answer{name, a}
}

func echoLine(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != msg+"\n" {
		t.Fatalf("kept connection: echo %q, %v; want %q", line, err, msg)
	}
}
