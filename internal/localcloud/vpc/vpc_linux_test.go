package vpc_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
)

// TestVPC makes a VPC with two machines and shows: the host reaches the
// machines, the machines reach a host loopback service only through the
// gateway, a VPC route carries traffic to a machine's pod range and its
// deletion stops it, the covered ranges are unreachable rather than sent to
// the default route, forwarding is on only in the router, and Down leaves
// nothing of it on the host.
func TestVPC(t *testing.T) {
	vpctest.RequireRoot(t)
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	nw, r := vpctest.Start(t)
	id := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(nw.RouterNetns(), "/run/netns/"), "ps"), "-router")

	if free, err := vpc.Unused(r.Block); err != nil || free {
		t.Errorf("Unused(%s) = %v, %v while the VPC covers it", r.Block, free, err)
	}
	m1, m2 := machineNetns(t, id, 1), machineNetns(t, id, 2)
	a1, a2 := r.Subnet.Addr().Next().Next(), r.Subnet.Addr().Next().Next().Next()
	if err := nw.Attach(1, m1, a1); err != nil {
		t.Fatal(err)
	}
	if err := nw.Attach(2, m2, a2); err != nil {
		t.Fatal(err)
	}
	if err := nw.Attach(3, m2, nw.Gateway()); err == nil {
		t.Error("Attach took the gateway's address for a machine")
	}

	// The host reaches a machine.
	echoIn(t, m1, netip.AddrPortFrom(a1, 7001))
	expectEcho(t, "", netip.AddrPortFrom(a1, 7001))

	// A machine reaches a loopback-only host service through the gateway.
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
	if ex.Addr().Addr() != nw.Gateway() {
		t.Errorf("exposed at %v, want the gateway %v", ex.Addr(), nw.Gateway())
	}
	expectEcho(t, m1, ex.Addr())

	// A route for machine 2's pod range: from the host and from machine 1.
	podNet := netip.PrefixFrom(r.Pods.Addr(), 24)
	pod := podNet.Addr().Next()
	ipCmd(t, "-n", m2, "addr", "add", pod.String()+"/32", "dev", "lo")
	echoIn(t, m2, netip.AddrPortFrom(pod, 7002))
	expectNoConn(t, "", netip.AddrPortFrom(pod, 7002)) // no route yet: unreachable, not elsewhere
	if err := nw.SetRoute(podNet, a2); err != nil {
		t.Fatal(err)
	}
	if routes, err := nw.Routes(); err != nil || len(routes) != 1 || routes[0] != (vpc.Route{Dst: podNet, Via: a2}) {
		t.Errorf("Routes() = %v, %v; want [%v via %v]", routes, err, podNet, a2)
	}
	expectEcho(t, "", netip.AddrPortFrom(pod, 7002))
	expectEcho(t, m1, netip.AddrPortFrom(pod, 7002))
	if err := nw.DeleteRoute(podNet); err != nil {
		t.Fatal(err)
	}
	expectNoConn(t, "", netip.AddrPortFrom(pod, 7002))
	if err := nw.SetRoute(podNet, netip.MustParseAddr("192.0.2.1")); err == nil {
		t.Error("SetRoute took a next hop outside the VPC")
	}

	// Covered: an unused VIP and an address outside the routed ranges are
	// refused at once on the host, never sent to the default route.
	for _, a := range []netip.Addr{r.VIPs.Addr().Next(), r.Block.Addr().Next().Next().Next().Next().Next().Next().Next().Next().Next()} {
		if route := routeGet(t, a); !strings.Contains(route, "unreachable") && !strings.Contains(route, "dev ps"+id) {
			t.Errorf("host route to %v: %q, want unreachable or into the VPC", a, route)
		}
	}
	if got := readSysctlIn(t, nw.RouterNetns(), "/proc/sys/net/ipv4/ip_forward"); got != "1" {
		t.Errorf("router forwarding = %q, want 1", got)
	}

	// Our cover route for the pods' range vanished and someone else (a
	// person, a routing daemon) added an identical one since: Down must
	// leave theirs, which differs from ours only by its protocol.
	theirs := []string{"unreachable", r.Pods.String(), "metric", "4000", "proto", "static"}
	ipCmd(t, "route", "del", "unreachable", r.Pods.String(), "metric", "4000", "proto", vpc.RouteProto)
	ipCmd(t, append([]string{"route", "add"}, theirs...)...)
	t.Cleanup(func() { _ = exec.Command("ip", append([]string{"route", "del"}, theirs...)...).Run() })
	stateFile := vpcState(t, nw)
	if err := vpc.Down(context.Background(), stateFile); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", append([]string{"route", "show"}, theirs[1:]...)...).CombinedOutput(); !strings.Contains(string(out), "unreachable "+r.Pods.String()) {
		t.Errorf("Down removed a route it did not make (%v): ip route show: %q", theirs, out)
	}
	ipCmd(t, append([]string{"route", "del"}, theirs...)...)
	delNetns(t, m1)
	delNetns(t, m2)
	after, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	mine := []string{"ps" + id, r.Subnet.Addr().String()[:strings.LastIndex(r.Subnet.Addr().String(), ".")+1],
		r.Pods.Addr().String()[:strings.LastIndex(r.Pods.Addr().String(), ".")]}
	if d := hostsnap.Diff(before.Mentioning(mine...), after.Mentioning(mine...)); d != "" {
		t.Errorf("the host differs after Down:\n%s", d)
	}
	if d := hostsnap.Diff(Snapshot(before, "sysctl"), Snapshot(after, "sysctl")); d != "" {
		t.Errorf("host sysctls changed:\n%s", d)
	}
}

func Snapshot(s hostsnap.Snapshot, part string) hostsnap.Snapshot {
	return hostsnap.Snapshot{part: s[part]}
}

func vpcState(t *testing.T, nw *vpc.Network) string { return nw.StateFile() }

func machineNetns(t *testing.T, id string, i int) string {
	name := fmt.Sprintf("ps%s-t%d", id, i)
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() { delNetns(t, name) })
	return name
}

func delNetns(t *testing.T, name string) {
	if _, err := os.Stat(vpc.NetnsPath(name)); err == nil {
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func routeGet(t *testing.T, a netip.Addr) string {
	out, _ := exec.Command("ip", "route", "get", a.String()).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func echoIn(t *testing.T, netns string, at netip.AddrPort) {
	t.Helper()
	l, err := vpc.ListenIn(vpc.NetnsPath(netns), "tcp", at.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go serveEcho(l)
}

func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
	}
}

// dialFrom dials from the host ("") or from inside a namespace.
func dialFrom(netns string, to netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if netns == "" {
		return d.Dial("tcp", to.String())
	}
	var c net.Conn
	err := vpc.InNetns(vpc.NetnsPath(netns), func() error {
		var err error
		c, err = d.Dial("tcp", to.String())
		return err
	})
	return c, err
}

func expectEcho(t *testing.T, from string, to netip.AddrPort) {
	t.Helper()
	c, err := dialFrom(from, to)
	if err != nil {
		t.Fatalf("from %q to %v: %v", from, to, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "hello %v\n", to); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != fmt.Sprintf("hello %v\n", to) {
		t.Fatalf("from %q to %v: echo %q, %v", from, to, line, err)
	}
}

func expectNoConn(t *testing.T, from string, to netip.AddrPort) {
	t.Helper()
	if c, err := dialFrom(from, to); err == nil {
		c.Close()
		t.Fatalf("from %q to %v: connected, want no route", from, to)
	}
}

func readSysctlIn(t *testing.T, netns, path string) string {
	var v string
	if err := vpc.InNetns(netns, func() error {
		b, err := os.ReadFile(path)
		v = strings.TrimSpace(string(b))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}
