package dataplane

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestPoweredOffBackendUnhealthy: a stopped instance's backend fails its
// checks (though something still listens at its address, as the simulated
// nodes do) and traffic goes to the others; started again, it is back.
func TestPoweredOffBackendUnhealthy(t *testing.T) {
	p := fastPlane(t)
	a := startBackend(t, "a", randomLoopback(), 0)
	b := startBackend(t, "b", randomLoopback(), a.port())
	vip := randomLoopback()
	port := freePort(t, vip)
	if err := p.Apply(Config{Name: "lb-off", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}, {Name: "b", Address: b.ip.String()}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "both healthy", func() bool { return backendHealthy(p, "lb-off", a.ip) && backendHealthy(p, "lb-off", b.ip) })
	p.SetPoweredOff([]netip.Addr{a.ip}, true)
	waitFor(t, 5*time.Second, "a unhealthy once stopped", func() bool { return !backendHealthy(p, "lb-off", a.ip) })
	h, _ := p.Health("lb-off")
	for _, be := range h.Backends {
		if be.Address == a.ip.String() && !strings.Contains(be.LastError, "instance is stopped") {
			t.Errorf("lastError of the stopped backend: %q", be.LastError)
		}
	}
	for range 10 {
		if got, err := ask(netip.AddrPortFrom(vip, uint16(port)), netip.Addr{}); err != nil || got != "b" {
			t.Fatalf("with a stopped: answer %q, %v; want b", got, err)
		}
	}
	if !backendHealthy(p, "lb-off", b.ip) {
		t.Error("b became unhealthy")
	}
	p.SetPoweredOff([]netip.Addr{a.ip}, false)
	waitFor(t, 5*time.Second, "a healthy once started", func() bool { return backendHealthy(p, "lb-off", a.ip) })
}
