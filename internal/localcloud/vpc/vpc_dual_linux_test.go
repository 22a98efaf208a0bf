package vpc_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
)

// TestVPCDualStack: a dual-stack VPC (an IPv6 ULA /48 of its own beside the
// IPv4 ranges) carries IPv6 as it carries IPv4: the host reaches a machine
// at its IPv6 address, machines reach each other, an IPv6 VPC route carries
// traffic to a machine's IPv6 pod range (from the host and from the other
// machine) and its deletion stops it; IPv6 addresses the VPC does not route
// are unreachable on the host, never sent to its default route; IPv6
// forwarding is on only in the router; Down leaves nothing of it, and no
// host sysctl changed.
func TestVPCDualStack(t *testing.T) {
	vpctest.RequireRoot(t)
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	nw, r := vpctest.StartDual(t)
	id := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(nw.RouterNetns(), "/run/netns/"), "ps"), "-router")
	if free, err := vpc.Unused(r.Block6); err != nil || free {
		t.Errorf("Unused(%s) = %v, %v while the VPC covers it", r.Block6, free, err)
	}
	if gw := nw.Gateway6(); gw != r.Subnet6.Addr().Next() {
		t.Errorf("Gateway6() = %v, want %v", gw, r.Subnet6.Addr().Next())
	}
	m1, m2 := machineNetns(t, id, 1), machineNetns(t, id, 2)
	a1, a2 := r.Subnet.Addr().Next().Next(), r.Subnet.Addr().Next().Next().Next()
	b1, b2 := r.Subnet6.Addr().Next().Next(), r.Subnet6.Addr().Next().Next().Next()
	for i, m := range []struct {
		netns  string
		v4, v6 netip.Addr
	}{{m1, a1, b1}, {m2, a2, b2}} {
		if err := nw.Attach(i+1, m.netns, m.v4); err != nil {
			t.Fatal(err)
		}
		if err := nw.Attach6(m.netns, m.v6); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []netip.Addr{nw.Gateway6(), r.Subnet6.Addr(), r.VIPs6.Addr().Next(), a1} {
		if err := nw.Attach6(m2, bad); err == nil {
			t.Errorf("Attach6 took %v for a machine", bad)
		}
	}

	// Both families, host to machine and machine to machine.
	echoIn(t, m1, netip.AddrPortFrom(b1, 7001))
	expectEcho(t, "", netip.AddrPortFrom(b1, 7001))
	expectEcho(t, m2, netip.AddrPortFrom(b1, 7001))
	echoIn(t, m1, netip.AddrPortFrom(a1, 7003))
	expectEcho(t, m2, netip.AddrPortFrom(a1, 7003))

	// A listener on an IPv6 VIP of the router's local range (the cloud's
	// load balancers bind them so), reached from the host and a machine.
	vip := r.VIPs6.Addr().Next().Next()
	echoIn(t, nw.RouterNetns()[len("/run/netns/"):], netip.AddrPortFrom(vip, 7005))
	expectEcho(t, "", netip.AddrPortFrom(vip, 7005))
	expectEcho(t, m1, netip.AddrPortFrom(vip, 7005))

	// A routed IPv6 VIP: the router forwards its port to machine 1's IPv6
	// address (where the VIP is local, as kube-proxy makes it), and after
	// its deletion refuses it again; a backend outside the IPv6 subnet is
	// refused.
	rvip := r.VIPs6.Addr().Next().Next().Next()
	ipCmd(t, "-n", m1, "addr", "add", rvip.String()+"/128", "dev", "lo", "nodad")
	echoIn(t, m1, netip.AddrPortFrom(rvip, 7006))
	routed := vpc.RoutedVIP{VIP: rvip, Ports: []vpc.VIPPort{{Protocol: "tcp", Port: 7006}}, Via: []netip.Addr{b1}}
	if err := nw.SetRoutedVIP(routed); err != nil {
		t.Fatal(err)
	}
	expectEcho(t, "", netip.AddrPortFrom(rvip, 7006))
	expectEcho(t, m2, netip.AddrPortFrom(rvip, 7006))
	if err := nw.SetRoutedVIP(vpc.RoutedVIP{VIP: rvip, Ports: routed.Ports, Via: []netip.Addr{a1}}); err == nil {
		t.Errorf("SetRoutedVIP %v via the IPv4 address %v: no error", rvip, a1)
	}
	if err := nw.DeleteRoutedVIP(rvip); err != nil {
		t.Fatal(err)
	}
	expectNoConn(t, "", netip.AddrPortFrom(rvip, 7006))

	// A loopback-only host service exposed at both gateways, one port:
	// a machine reaches it over IPv6 too.
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	go serveEcho(lo)
	ex, err := nw.Expose(context.Background(), 0, lo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if ex.Addr6() != netip.AddrPortFrom(nw.Gateway6(), ex.Addr().Port()) {
		t.Errorf("exposed at %v and %v, want the IPv6 gateway %v on the same port", ex.Addr(), ex.Addr6(), nw.Gateway6())
	}
	expectEcho(t, m1, ex.Addr6())

	// An IPv6 route for machine 2's pod range.
	podNet := netip.PrefixFrom(r.Pods6.Addr(), 64)
	pod := podNet.Addr().Next()
	ipCmd(t, "-n", m2, "addr", "add", pod.String()+"/128", "dev", "lo", "nodad")
	echoIn(t, m2, netip.AddrPortFrom(pod, 7002))
	expectNoConn(t, "", netip.AddrPortFrom(pod, 7002))
	if err := nw.SetRoute(podNet, b2); err != nil {
		t.Fatal(err)
	}
	if routes, err := nw.Routes(); err != nil || len(routes) != 1 || routes[0] != (vpc.Route{Dst: podNet, Via: b2}) {
		t.Errorf("Routes() = %v, %v; want [%v via %v]", routes, err, podNet, b2)
	}
	expectEcho(t, "", netip.AddrPortFrom(pod, 7002))
	expectEcho(t, m1, netip.AddrPortFrom(pod, 7002))
	for _, bad := range []netip.Addr{a2, netip.MustParseAddr("fd00::1")} {
		if err := nw.SetRoute(podNet, bad); err == nil {
			t.Errorf("SetRoute %v via %v: no error", podNet, bad)
		}
	}
	if err := nw.DeleteRoute(podNet); err != nil {
		t.Fatal(err)
	}
	expectNoConn(t, "", netip.AddrPortFrom(pod, 7002))
	if routes, err := nw.Routes(); err != nil || len(routes) != 0 {
		t.Errorf("Routes() after the delete = %v, %v", routes, err)
	}

	// Covered: an unused IPv6 VIP and an address of the /48 the VPC does
	// not route are refused on the host.
	for _, a := range []netip.Addr{r.VIPs6.Addr().Next(), r.Block6.Addr().Next().Next().Next().Next().Next().Next().Next().Next().Next()} {
		if route := routeGet(t, a); !strings.Contains(route, "unreachable") && !strings.Contains(route, "dev ps"+id) {
			t.Errorf("host route to %v: %q, want unreachable or into the VPC", a, route)
		}
	}
	if got := readSysctlIn(t, nw.RouterNetns(), "/proc/sys/net/ipv6/conf/all/forwarding"); got != "1" {
		t.Errorf("router IPv6 forwarding = %q, want 1", got)
	}

	if err := vpc.Down(context.Background(), nw.StateFile()); err != nil {
		t.Fatal(err)
	}
	delNetns(t, m1)
	delNetns(t, m2)
	after, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	v4 := r.Subnet.Addr().String()
	block6 := r.Block6.Addr().String()
	mine := []string{"ps" + id, v4[:strings.LastIndex(v4, ".")+1], strings.TrimSuffix(block6, "::")}
	if d := hostsnap.Diff(before.Mentioning(mine...), after.Mentioning(mine...)); d != "" {
		t.Errorf("the host differs after Down:\n%s", d)
	}
	if d := hostsnap.Diff(Snapshot(before, "sysctl"), Snapshot(after, "sysctl")); d != "" {
		t.Errorf("host sysctls changed:\n%s", d)
	}
}
