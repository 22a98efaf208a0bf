package dataplane

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// liveConn is a proxied connection the test talks through line by line.
type liveConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialLive(t *testing.T, target netip.AddrPort) *liveConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", target.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &liveConn{c: c, r: bufio.NewReader(c)}
}

// ask returns the answering backend's name, or the error.
func (lc *liveConn) ask(wait time.Duration) (string, error) {
	_ = lc.c.SetDeadline(time.Now().Add(wait))
	if _, err := lc.c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	line, err := lc.r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// closedWithin reports whether the proxy closes lc (EOF or reset) within
// wait; a timeout means it is still open.
func (lc *liveConn) closedWithin(wait time.Duration) bool {
	_ = lc.c.SetReadDeadline(time.Now().Add(wait))
	for {
		if _, err := lc.r.ReadString('\n'); err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

func drainPlane(t *testing.T, drain time.Duration) *Plane {
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 200 * time.Millisecond, DrainTimeout: drain})
	t.Cleanup(p.Close)
	return p
}

// TestBackendPortChangeDrains: connections to a listener's old backend port
// keep going for DrainTimeout, then are closed; new ones go to the new port.
func TestBackendPortChangeDrains(t *testing.T) {
	p := drainPlane(t, 4*time.Second)
	ip := randomLoopback()
	x := startBackend(t, "x", ip, 0) // the first TCP listener's port: the health check
	y := startBackend(t, "y", ip, 0)
	z := startBackend(t, "z", ip, 0)
	vip := randomLoopback()
	p1, p2 := freePort(t, vip), freePort(t, vip)
	cfg := Config{Name: "lb-port", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: p1, BackendPort: x.port()}, {Protocol: api.ProtocolTCP, Port: p2, BackendPort: y.port()}},
		Backends:  []api.Backend{{Name: "n", Address: ip.String()}}}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(p2))
	old := dialLive(t, target)
	if name, err := old.ask(10 * time.Second); err != nil || name != "y" {
		t.Fatalf("before the change: %q %v", name, err)
	}
	cfg.Listeners[1].BackendPort = z.port()
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if name, err := old.ask(time.Second); err != nil || name != "y" {
		t.Fatalf("old connection broke before DrainTimeout: %q %v", name, err)
	}
	if name, err := dialLive(t, target).ask(10 * time.Second); err != nil || name != "z" {
		t.Fatalf("new connection: %q %v, want the new port (z)", name, err)
	}
	if !old.closedWithin(15 * time.Second) {
		t.Fatal("connection to the old backend port not closed after DrainTimeout")
	}
	if name, err := dialLive(t, netip.AddrPortFrom(vip, uint16(p1))).ask(10 * time.Second); err != nil || name != "x" {
		t.Fatalf("other listener: %q %v, want x", name, err)
	}
}

// TestHealthCheckChangeDrains: a changed health check drains the backend's
// connections as a removed backend's.
func TestHealthCheckChangeDrains(t *testing.T) {
	p := drainPlane(t, 4*time.Second)
	a := startBackend(t, "a", randomLoopback(), 0)
	target := tcpLB(t, p, "lb-hc", a)
	old := dialLive(t, target)
	if name, err := old.ask(10 * time.Second); err != nil || name != "a" {
		t.Fatalf("before the change: %q %v", name, err)
	}
	hcPort := http200(t, a.ip)
	if err := p.Apply(Config{Name: "lb-hc", VIPs: []netip.Addr{target.Addr()},
		Listeners:   []api.Listener{{Protocol: api.ProtocolTCP, Port: int(target.Port()), BackendPort: a.port()}},
		Backends:    []api.Backend{{Name: "a", Address: a.ip.String()}},
		HealthCheck: &api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/", Port: hcPort}}); err != nil {
		t.Fatal(err)
	}
	h, _ := p.Health("lb-hc")
	if len(h.Backends) != 2 || !(h.Backends[0].Draining || h.Backends[1].Draining) {
		t.Fatalf("health = %+v, want the old backend draining and the new one", h.Backends)
	}
	if name, err := dialLive(t, target).ask(10 * time.Second); err != nil || name != "a" {
		t.Fatalf("new connection: %q %v", name, err)
	}
	if !old.closedWithin(15 * time.Second) {
		t.Fatal("connection admitted under the old health check not closed after DrainTimeout")
	}
}

// http200 answers 200 to every request on a port of ip, for health checks.
func http200(t *testing.T, ip netip.Addr) int {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRemoveClosesConnsAndFlows: Remove closes established connections,
// also those of a backend draining after a health-check change, and UDP
// flows, at once rather than after DrainTimeout.
func TestRemoveClosesConnsAndFlows(t *testing.T) {
	p := drainPlane(t, time.Minute)
	a := startBackend(t, "a", randomLoopback(), 0)
	bePort := udpEchoOn(t, a.ip)
	vip := randomLoopback()
	port := freePort(t, vip)
	cfg := Config{Name: "lb-gone", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}, {Protocol: api.ProtocolUDP, Port: port, BackendPort: bePort}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}}}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(port))
	first := dialLive(t, target)
	if _, err := first.ask(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The health check changes: first's backend drains (for a minute).
	cfg.HealthCheck = &api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/", Port: http200(t, a.ip)}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	second := dialLive(t, target)
	if _, err := second.ask(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A UDP flow; the backend tells the flow's upstream address.
	upstream := udpAsk(t, udpClient(t, target), 10*time.Second)
	if upstream == "" {
		t.Fatal("no UDP reply")
	}

	p.Remove("lb-gone")
	if !first.closedWithin(10*time.Second) || !second.closedWithin(10*time.Second) {
		t.Fatal("connections not closed within 10s of Remove")
	}
	// The flow's upstream socket is closed: its address can be bound again.
	waitFor(t, 10*time.Second, "UDP flow closed", func() bool {
		c, err := net.ListenPacket("udp", upstream)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	waitFor(t, 10*time.Second, "global counts back to 0", func() bool { return p.conns.n.Load() == 0 && p.flows.n.Load() == 0 })
}
