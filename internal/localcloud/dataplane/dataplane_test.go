package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// randomLoopback returns an address in 127.<a>.<b>.<c> that no other test
// (or test package running at the same time) is likely to use.
func randomLoopback() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(10 + rand.IntN(200)), byte(rand.IntN(250)), byte(2 + rand.IntN(250))})
}

// echoBackend answers each TCP line with its name, on ip:port (port 0: any).
type echoBackend struct {
	name string
	ip   netip.Addr
	ln   net.Listener
	up   atomic.Bool
}

func startBackend(t *testing.T, name string, ip netip.Addr, port int) *echoBackend {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	be := &echoBackend{name: name, ip: ip, ln: ln}
	be.up.Store(true)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := fmt.Fprintf(c, "%s\n", name); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return be
}

func (be *echoBackend) port() int { return be.ln.Addr().(*net.TCPAddr).Port }

// ask opens a connection from src (invalid: any) to vip:port and returns
// the backend name that answered, or the error.
func ask(vip netip.AddrPort, src netip.Addr) (string, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	c, err := d.Dial("tcp", vip.String())
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func freePort(t *testing.T, ip netip.Addr) int {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

func fastPlane(t *testing.T) *Plane {
	p := New(context.Background(), Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 200 * time.Millisecond, DrainTimeout: 500 * time.Millisecond})
	t.Cleanup(p.Close)
	return p
}

func TestTCPBalancesAndFollowsHealth(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	b := startBackend(t, "b", randomLoopback(), a.port())
	vip := randomLoopback()
	port := freePort(t, vip)
	cfg := Config{
		Name: "lb1", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}, {Name: "b", Address: b.ip.String()}},
	}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(port))
	counts := map[string]int{}
	for range 20 {
		name, err := ask(target, netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		counts[name]++
	}
	if counts["a"] < 5 || counts["b"] < 5 {
		t.Fatalf("traffic not balanced: %v", counts)
	}

	// b dies: within a few health intervals it gets no more traffic.
	_ = b.ln.Close()
	waitFor(t, 3*time.Second, "b marked unhealthy", func() bool { return !backendHealthy(p, "lb1", b.ip) })
	for range 10 {
		if name, err := ask(target, netip.Addr{}); err != nil || name != "a" {
			t.Fatalf("after b died got %q, %v", name, err)
		}
	}
	// b comes back: it gets traffic again.
	startBackend(t, "b", b.ip, a.port())
	waitFor(t, 3*time.Second, "b healthy again", func() bool { return backendHealthy(p, "lb1", b.ip) })
	seenB := false
	for range 10 {
		name, _ := ask(target, netip.Addr{})
		seenB = seenB || name == "b"
	}
	if !seenB {
		t.Fatal("b gets no traffic after recovering")
	}
}

func TestSourceRanges(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	vip := randomLoopback()
	port := freePort(t, vip)
	allowed := netip.MustParseAddr("127.3.3.3")
	if err := p.Apply(Config{
		Name: "lb-src", VIPs: []netip.Addr{vip},
		Listeners:    []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:     []api.Backend{{Name: "a", Address: a.ip.String()}},
		SourceRanges: []netip.Prefix{netip.MustParsePrefix("127.3.3.0/24")},
	}); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(port))
	if name, err := ask(target, allowed); err != nil || name != "a" {
		t.Fatalf("allowed client: %q %v", name, err)
	}
	if name, err := ask(target, netip.MustParseAddr("127.4.4.4")); err == nil {
		t.Fatalf("client outside the source ranges was served by %q", name)
	}
}

func TestHTTPHealthCheckForLocalTraffic(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	b := startBackend(t, "b", randomLoopback(), a.port())
	// Only a reports local endpoints on its health-check port.
	hcPort := freePort(t, a.ip)
	for _, be := range []*echoBackend{a, b} {
		code := http.StatusServiceUnavailable
		if be.name == "a" {
			code = http.StatusOK
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(be.ip, uint16(hcPort)).String())
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.WriteHeader(code)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{
		Name: "lb-local", VIPs: []netip.Addr{vip},
		Listeners:   []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:    []api.Backend{{Name: "a", Address: a.ip.String()}, {Name: "b", Address: b.ip.String()}},
		HealthCheck: &api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: hcPort},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "b failing its HTTP check", func() bool { return !backendHealthy(p, "lb-local", b.ip) })
	for range 10 {
		if name, err := ask(netip.AddrPortFrom(vip, uint16(port)), netip.Addr{}); err != nil || name != "a" {
			t.Fatalf("got %q %v; only a passes the health check", name, err)
		}
	}
}

// TestHTTPHealthCheckDoesNotFollowRedirects: a health-check port that
// redirects to a 200 is not healthy.
func TestHTTPHealthCheckDoesNotFollowRedirects(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	hcPort := freePort(t, a.ip)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a.ip, uint16(hcPort)).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			http.Redirect(w, r, "/ok", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	vip := randomLoopback()
	if err := p.Apply(Config{
		Name: "lb-redirect", VIPs: []netip.Addr{vip},
		Listeners:   []api.Listener{{Protocol: api.ProtocolTCP, Port: freePort(t, vip), BackendPort: a.port()}},
		Backends:    []api.Backend{{Name: "a", Address: a.ip.String()}},
		HealthCheck: &api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: hcPort},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a failing its HTTP check (302)", func() bool { return !backendHealthy(p, "lb-redirect", a.ip) })
	time.Sleep(500 * time.Millisecond)
	if backendHealthy(p, "lb-redirect", a.ip) {
		t.Fatal("a backend whose health check redirects became healthy")
	}
}

func TestUDP(t *testing.T) {
	p := fastPlane(t)
	beIP := randomLoopback()
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(beIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte("udp:"+string(buf[:n])), from)
		}
	}()
	bePort := pc.LocalAddr().(*net.UDPAddr).Port
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{
		Name: "lb-udp", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolUDP, Port: port, BackendPort: bePort}},
		Backends:  []api.Backend{{Name: "u", Address: beIP.String()}},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", netip.AddrPortFrom(vip, uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	for i := range 3 {
		msg := fmt.Sprintf("ping%d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "udp:"+msg {
			t.Fatalf("reply %q %v", buf[:n], err)
		}
	}
}

func TestRemoveClosesListenerAndDrains(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	vip := randomLoopback()
	port := freePort(t, vip)
	cfg := Config{
		Name: "lb-rm", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}},
	}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(port))
	// An open connection to a backend that is removed keeps working while
	// draining, then is closed after DrainTimeout.
	c, err := net.Dial("tcp", target.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cfg.Backends = nil
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "a" {
		t.Fatalf("draining connection broke early: %q %v", line, err)
	}
	h, _ := p.Health("lb-rm")
	if len(h.Backends) != 1 || !h.Backends[0].Draining {
		t.Fatalf("health = %+v, want one draining backend", h)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("draining connection not closed after DrainTimeout")
	}
	// With no backends, new connections are refused.
	if _, err := ask(target, netip.Addr{}); err == nil {
		t.Fatal("served with no backends")
	}
	p.Remove("lb-rm")
	if _, err := net.DialTimeout("tcp", target.String(), time.Second); err == nil {
		t.Fatal("listener still open after Remove")
	}
	if _, ok := p.Health("lb-rm"); ok {
		t.Fatal("removed load balancer still reported")
	}
}

func backendHealthy(p *Plane, lb string, ip netip.Addr) bool {
	h, _ := p.Health(lb)
	for _, be := range h.Backends {
		if be.Address == ip.String() {
			return be.Healthy
		}
	}
	return false
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
