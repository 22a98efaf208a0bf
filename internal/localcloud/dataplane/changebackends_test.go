package dataplane

import (
	"bufio"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestChangeBackends: a backend added by a change takes traffic, a removed
// one drains (an open connection through it keeps working until the drain
// timeout), the untouched one keeps its health state.
func TestChangeBackends(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	b := startBackend(t, "b", randomLoopback(), a.port())
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{Name: "lb-c", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}}}); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(vip, uint16(port))
	waitFor(t, 5*time.Second, "a healthy", func() bool { return backendHealthy(p, "lb-c", a.ip) })
	h0, _ := p.Health("lb-c")
	checkedA := h0.Backends[0].LastChecked

	// An open connection through a, for the drain below.
	conn, err := net.DialTimeout("tcp", target.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	roundTrip := func() (string, error) {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte("hi\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip(); err != nil || got != "a\n" {
		t.Fatalf("through a: %q, %v", got, err)
	}

	if err := p.ChangeBackends("lb-c", []api.Backend{{Name: "b", Address: b.ip.String()}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b healthy", func() bool { return backendHealthy(p, "lb-c", b.ip) })
	seen := map[string]int{}
	for range 20 {
		name, err := ask(target, netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("after adding b: %v", seen)
	}
	h1, _ := p.Health("lb-c")
	for _, be := range h1.Backends {
		if be.Address == a.ip.String() && be.LastChecked.Before(checkedA) {
			t.Error("a's health state was reset by a change that did not touch it")
		}
	}

	if err := p.ChangeBackends("lb-c", nil, []api.Backend{{Name: "a", Address: a.ip.String()}}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if name, err := ask(target, netip.Addr{}); err != nil || name != "b" {
			t.Fatalf("after removing a: %q, %v", name, err)
		}
	}
	if got, err := roundTrip(); err != nil || got != "a\n" {
		t.Fatalf("the open connection through a while it drains: %q, %v", got, err)
	}
	waitFor(t, 5*time.Second, "a's connection closed after the drain timeout", func() bool {
		_, err := roundTrip()
		return err != nil
	})
	// Idempotent: adding b again, removing a again.
	if err := p.ChangeBackends("lb-c", []api.Backend{{Name: "b2", Address: b.ip.String()}}, []api.Backend{{Address: a.ip.String()}}); err != nil {
		t.Fatal(err)
	}
	h2, _ := p.Health("lb-c")
	if len(h2.Backends) != 1 || h2.Backends[0].Name != "b2" {
		t.Errorf("backends after a repeated change: %+v", h2.Backends)
	}
	// A removal naming another node (b's address was a deleted node's):
	// b2 stays.
	if err := p.ChangeBackends("lb-c", nil, []api.Backend{{Name: "b", Address: b.ip.String()}}); err != nil {
		t.Fatal(err)
	}
	h3, _ := p.Health("lb-c")
	if len(h3.Backends) != 1 || h3.Backends[0].Name != "b2" || h3.Backends[0].Draining {
		t.Errorf("backends after a removal naming another node: %+v", h3.Backends)
	}
	if err := p.ChangeBackends("no-such-lb", nil, nil); err == nil {
		t.Error("a change of a load balancer not in the data plane succeeded")
	}
}
