package dataplane

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestLimiter(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max, held int64
		want      bool
	}{
		{"under", 3, 2, true},
		{"at cap", 3, 3, false},
		{"cap 1, empty", 1, 0, true},
		{"no cap", -1, 1 << 40, true},
	} {
		l := limiter{max: tc.max}
		l.n.Store(tc.held)
		if got := l.acquire(); got != tc.want {
			t.Errorf("%s: acquire = %v, want %v", tc.name, got, tc.want)
		}
		want := tc.held
		if tc.want {
			want++
		}
		if l.n.Load() != want {
			t.Errorf("%s: count = %d, want %d", tc.name, l.n.Load(), want)
		}
	}
	// acquireBoth takes from both or neither.
	lb, global := limiter{max: 5}, limiter{max: 1}
	global.n.Store(1)
	if acquireBoth(&lb, &global) || lb.n.Load() != 0 || global.n.Load() != 1 {
		t.Fatalf("acquireBoth over the global cap: lb=%d global=%d", lb.n.Load(), global.n.Load())
	}
}

// openProxied opens a connection to target and waits for backend's
// answer, so it is counted before the next one.
func openProxied(t *testing.T, target netip.AddrPort) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", target.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("connection under the cap not proxied: %v", err)
	}
	return c
}

// closedByProxy reports whether the proxy closes a new connection to
// target (EOF or reset) rather than proxying it, within a generous deadline.
func closedByProxy(t *testing.T, target netip.AddrPort) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", target.String(), 5*time.Second)
	if errors.Is(err, syscall.ECONNRESET) {
		return true // the reset came before connect returned
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write([]byte("hi\n"))
	_, err = bufio.NewReader(c).ReadString('\n')
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func tcpLB(t *testing.T, p *Plane, name string, be *echoBackend) netip.AddrPort {
	t.Helper()
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{Name: name, VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: be.port()}},
		Backends:  []api.Backend{{Name: be.name, Address: be.ip.String()}}}); err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(vip, uint16(port))
}

// TestTCPConnCaps: with caps of 3 per load balancer and 4 in all, a fourth
// connection to one load balancer is closed, and so is a second one to
// another once the global cap is reached; closing one frees a slot.
func TestTCPConnCaps(t *testing.T) {
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, MaxConnsPerLoadBalancer: 3, MaxConns: 4})
	t.Cleanup(p.Close)
	a := startBackend(t, "a", randomLoopback(), 0)
	t1, t2 := tcpLB(t, p, "lb-cap1", a), tcpLB(t, p, "lb-cap2", a)
	var open []net.Conn
	for range 3 {
		open = append(open, openProxied(t, t1))
	}
	for i := range 2 {
		if !closedByProxy(t, t1) {
			t.Fatalf("connection %d over the per-load-balancer cap of 3 was not closed", 4+i)
		}
	}
	openProxied(t, t2) // the 4th in all
	if !closedByProxy(t, t2) {
		t.Fatal("connection over the global cap of 4 was not closed")
	}
	h, _ := p.Health("lb-cap1")
	if len(h.Listeners) != 1 || h.Listeners[0].Active != 3 || h.Listeners[0].Rejected != 2 {
		t.Fatalf("lb-cap1 health = %+v, want 3 active, 2 rejected", h.Listeners)
	}
	_ = open[0].Close()
	waitFor(t, 10*time.Second, "a slot freed", func() bool { return p.conns.n.Load() == 3 })
	openProxied(t, t1)
}

// udpEcho answers each datagram with the sender's address.
func udpEcho(t *testing.T) (netip.Addr, int) {
	t.Helper()
	ip := randomLoopback()
	return ip, udpEchoOn(t, ip)
}

func udpEchoOn(t *testing.T, ip netip.Addr) int {
	t.Helper()
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteToUDPAddrPort([]byte(from.String()), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

func udpLB(t *testing.T, p *Plane, name string) netip.AddrPort {
	t.Helper()
	beIP, bePort := udpEcho(t)
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{Name: name, VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolUDP, Port: port, BackendPort: bePort}},
		Backends:  []api.Backend{{Name: "u", Address: beIP.String()}}}); err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(vip, uint16(port))
}

// udpAsk sends from c and returns the backend's answer (the flow's source
// address as the backend sees it), or "" after wait.
func udpAsk(t *testing.T, c net.Conn, wait time.Duration) string {
	t.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func udpClient(t *testing.T, target netip.AddrPort) net.Conn {
	t.Helper()
	c, err := net.Dial("udp", target.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestUDPFlowCap: clients on 8 source ports get at most 3 flows; the
// datagrams of the others are dropped and counted.
func TestUDPFlowCap(t *testing.T) {
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, MaxUDPFlowsPerLoadBalancer: 3})
	t.Cleanup(p.Close)
	target := udpLB(t, p, "lb-udpcap")
	for i := range 8 {
		c := udpClient(t, target)
		wait := 10 * time.Second // a reply must come
		if i >= 3 {
			wait = 300 * time.Millisecond // none may come
		}
		got := udpAsk(t, c, wait)
		if i < 3 && got == "" {
			t.Fatalf("flow %d under the cap got no reply", i+1)
		}
		if i >= 3 && got != "" {
			t.Fatalf("flow %d over the cap of 3 was forwarded", i+1)
		}
	}
	waitFor(t, 10*time.Second, "3 flows, 5 datagrams rejected", func() bool {
		h, _ := p.Health("lb-udpcap")
		return len(h.Listeners) == 1 && h.Listeners[0].Active == 3 && h.Listeners[0].Rejected == 5
	})
}

// TestUDPFlowsExpire: idle flows end after UDPIdleTimeout (the count drops)
// and the next datagram opens a new flow (a new upstream port).
func TestUDPFlowsExpire(t *testing.T) {
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, UDPIdleTimeout: 200 * time.Millisecond})
	t.Cleanup(p.Close)
	target := udpLB(t, p, "lb-udpidle")
	var clients []net.Conn
	var first string
	for range 5 {
		c := udpClient(t, target)
		clients = append(clients, c)
		if got := udpAsk(t, c, 10*time.Second); got == "" {
			t.Fatal("no reply")
		} else if first == "" {
			first = got
		}
	}
	flows := func() int64 {
		h, _ := p.Health("lb-udpidle")
		if len(h.Listeners) != 1 {
			return -1
		}
		return h.Listeners[0].Active
	}
	if n := flows(); n < 1 || n > 5 {
		t.Fatalf("flows = %d, want 1..5 (some may have expired already)", n)
	}
	waitFor(t, 10*time.Second, "idle flows to expire", func() bool { return flows() == 0 && p.flows.n.Load() == 0 })
	if got := udpAsk(t, clients[0], 10*time.Second); got == "" || got == first {
		t.Fatalf("after expiry the flow answered from %q, first from %q: want a new flow", got, first)
	}
}

// TestUDPFlowCapGlobal: the global cap spans load balancers.
func TestUDPFlowCapGlobal(t *testing.T) {
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, MaxUDPFlows: 2})
	t.Cleanup(p.Close)
	t1, t2 := udpLB(t, p, "lb-g1"), udpLB(t, p, "lb-g2")
	if udpAsk(t, udpClient(t, t1), 10*time.Second) == "" || udpAsk(t, udpClient(t, t2), 10*time.Second) == "" {
		t.Fatal("flow under the global cap got no reply")
	}
	if got := udpAsk(t, udpClient(t, t1), 300*time.Millisecond); got != "" {
		t.Fatal("flow over the global cap of 2 was forwarded")
	}
	waitFor(t, 10*time.Second, "2 flows in all, 1 datagram rejected", func() bool {
		h, _ := p.Health("lb-g1")
		return p.flows.n.Load() == 2 && len(h.Listeners) == 1 && h.Listeners[0].Rejected == 1
	})
}
