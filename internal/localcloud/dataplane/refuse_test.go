package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestRefusedWithoutReadyBackends: while no backend is healthy a load
// balancer refuses connections (ECONNREFUSED: its listener is closed), as
// with nothing listening, instead of accepting and closing them; TCP and
// UDP alike, and it serves again once a backend is back. Connections open
// when the last backend failed are not cut by it.
func TestRefusedWithoutReadyBackends(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	vip := randomLoopback()
	port := freePort(t, vip)
	cfg := Config{Name: "lb-refuse", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}, {Protocol: api.ProtocolUDP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}}}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(port))
	if name, err := ask(target, netip.Addr{}); err != nil || name != "a" {
		t.Fatalf("before: %q %v", name, err)
	}
	open := dialLive(t, target)
	if name, err := open.ask(2 * time.Second); err != nil || name != "a" {
		t.Fatalf("long-lived connection: %q %v", name, err)
	}

	// The health check (a TCP connect to the backend port) fails from now
	// on; the connection already proxied stays (it is a's, not the port's).
	_ = a.ln.Close()
	waitFor(t, 3*time.Second, "a marked unhealthy", func() bool { return !backendHealthy(p, "lb-refuse", a.ip) })
	waitFor(t, 3*time.Second, "TCP refused", func() bool { return refused(dialTCP(target)) })
	if err := udpRefused(target); err != nil {
		t.Errorf("UDP with no ready backend: %v", err)
	}
	if h, _ := p.Health("lb-refuse"); h.Serving || len(h.Listeners) != 2 || h.Listeners[0].LastError == "" {
		t.Errorf("health while refusing: %+v, want both listeners not serving, saying why", h)
	}
	if name, err := open.ask(2 * time.Second); err != nil || name != "a" {
		t.Errorf("the open connection was cut when the listener closed: %q %v", name, err)
	}

	// Backends all removed: refused as well; a healthy one: served again.
	cfg.Backends = nil
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if err := dialTCP(target); !refused(err) {
		t.Errorf("no backends: %v, want connection refused", err)
	}
	b := startBackend(t, "b", randomLoopback(), a.port())
	cfg.Backends = []api.Backend{{Name: "b", Address: b.ip.String()}}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if name, err := ask(target, netip.Addr{}); err != nil || name != "b" {
		t.Fatalf("a healthy backend again: %q %v", name, err)
	}
}

func dialTCP(to netip.AddrPort) error {
	c, err := net.DialTimeout("tcp", to.String(), time.Second)
	if err == nil {
		_ = c.Close()
	}
	return err
}

func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// udpRefused sends a datagram on a connected socket: the ICMP port
// unreachable of a closed port comes back as ECONNREFUSED on the read.
func udpRefused(to netip.AddrPort) error {
	c, err := net.Dial("udp", to.String())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 64))
	if !refused(err) {
		return errors.New("no ICMP port unreachable: " + errString(err))
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "an answer"
	}
	return err.Error()
}
