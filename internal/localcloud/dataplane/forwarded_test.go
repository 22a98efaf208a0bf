package dataplane

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestForwardedVIPs(t *testing.T) {
	a, ap, p := netip.MustParseAddr, netip.MustParseAddrPort, netip.MustParsePrefix
	v4, v6 := a("198.18.1.10"), a("fd01::10")
	n1, n2, n6 := a("198.18.0.3"), a("198.18.0.2"), a("fd02::3")
	tcp80 := api.Listener{Protocol: "TCP", Port: 80, BackendPort: 30080}
	udp53 := api.Listener{Protocol: "UDP", Port: 53, BackendPort: 30053}
	for _, tc := range []struct {
		name  string
		cfg   Config
		ready []netip.Addr
		want  []ForwardedVIP
	}{
		{"each listener to the ready backends (sorted) at its backend port",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80, udp53}}, []netip.Addr{n1, n2},
			[]ForwardedVIP{{VIP: v4, Sources: nil, Ports: []ForwardedPort{
				{"TCP", 80, []netip.AddrPort{ap("198.18.0.2:30080"), ap("198.18.0.3:30080")}},
				{"UDP", 53, []netip.AddrPort{ap("198.18.0.2:30053"), ap("198.18.0.3:30053")}}}}}},
		{"no ready backend: the ports without backends (the proxy refuses)",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80}}, nil,
			[]ForwardedVIP{{VIP: v4, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{}}}}}},
		{"affinity and source ranges are the load balancer's",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80}, ClientIPAffinity: true, SourceRanges: []netip.Prefix{p("10.0.0.0/8")}}, []netip.Addr{n1},
			[]ForwardedVIP{{VIP: v4, Affinity: true, Sources: []netip.Prefix{p("10.0.0.0/8")}, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("198.18.0.3:30080")}}}}}},
		{"dual-stack: each VIP its own family's backends",
			Config{VIPs: []netip.Addr{v4, v6}, Listeners: []api.Listener{tcp80}}, []netip.Addr{n6, n1},
			[]ForwardedVIP{
				{VIP: v4, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("198.18.0.3:30080")}}}},
				{VIP: v6, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("[fd02::3]:30080")}}}}}},
		{"an IPv6 VIP with IPv4 backends only: left to the proxy (the kernel does not translate families)",
			Config{VIPs: []netip.Addr{v6}, Listeners: []api.Listener{tcp80}}, []netip.Addr{n1},
			[]ForwardedVIP{{VIP: v6, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{}}}}}},
		{"a listener twice: once",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80, tcp80}}, []netip.Addr{n1},
			[]ForwardedVIP{{VIP: v4, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("198.18.0.3:30080")}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := forwardedVIPs(tc.cfg, tc.ready)
			for i := range got {
				if len(got[i].Sources) == 0 {
					got[i].Sources = nil
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("forwardedVIPs =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestSameForwardedVIP(t *testing.T) {
	ap := netip.MustParseAddrPort
	base := ForwardedVIP{VIP: netip.MustParseAddr("198.18.1.10"), Sources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("198.18.0.2:30080")}}}}
	change := func(f func(*ForwardedVIP)) ForwardedVIP {
		c := base
		c.Ports = []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("198.18.0.2:30080")}}}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		b    ForwardedVIP
		want bool
	}{
		{"equal (copies)", change(func(*ForwardedVIP) {}), true},
		{"affinity", change(func(f *ForwardedVIP) { f.Affinity = true }), false},
		{"sources", change(func(f *ForwardedVIP) { f.Sources = nil }), false},
		{"a backend", change(func(f *ForwardedVIP) { f.Ports[0].Backends = []netip.AddrPort{ap("198.18.0.3:30080")} }), false},
		{"a backend port", change(func(f *ForwardedVIP) { f.Ports[0].Backends = []netip.AddrPort{ap("198.18.0.2:30081")} }), false},
		{"the listener port", change(func(f *ForwardedVIP) { f.Ports[0].Port = 81 }), false},
		{"the protocol", change(func(f *ForwardedVIP) { f.Ports[0].Protocol = "UDP" }), false},
	} {
		if got := sameForwardedVIP(base, tc.b); got != tc.want {
			t.Errorf("%s: sameForwardedVIP = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestKernelReady(t *testing.T) {
	for _, tc := range []struct {
		name            string
		healthy, lastOK bool
		want            bool
	}{
		{"new, not checked yet: the proxy takes it, the kernel waits", true, false, false},
		{"checked and passing", true, true, true},
		{"failed once, still in the proxy's rotation: off the kernel path", true, false, false},
		{"out of rotation, first pass back: still out (Rise)", false, true, false},
		{"out of rotation", false, false, false},
	} {
		if got := kernelReady(tc.healthy, tc.lastOK); got != tc.want {
			t.Errorf("%s: kernelReady(%v, %v) = %v, want %v", tc.name, tc.healthy, tc.lastOK, got, tc.want)
		}
	}
}

func TestChangedBackendPorts(t *testing.T) {
	l := func(proto string, port, bp int) api.Listener {
		return api.Listener{Protocol: proto, Port: port, BackendPort: bp}
	}
	for _, tc := range []struct {
		name     string
		old, cfg []api.Listener
		want     []FlowFilter
	}{
		{"unchanged", []api.Listener{l("TCP", 80, 30080)}, []api.Listener{l("TCP", 80, 30080)}, nil},
		{"a NodePort changed: the old one's flows", []api.Listener{l("TCP", 80, 30080), l("UDP", 80, 30081)},
			[]api.Listener{l("TCP", 80, 31000), l("UDP", 80, 30081)}, []FlowFilter{{Protocol: "TCP", Port: 80, BackendPort: 30080}}},
		{"a listener removed: not a port change (its flows go on as the proxy's)", []api.Listener{l("TCP", 80, 30080)}, nil, nil},
		{"routed before (no backend port): nothing to end", []api.Listener{l("TCP", 80, 0)}, []api.Listener{l("TCP", 80, 30080)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := changedBackendPorts(tc.old, tc.cfg); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("changedBackendPorts = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// recordingForwarder is a unit-test VIPForwarder: it records what the
// balancer asks of the router, and fails while fail is set.
type recordingForwarder struct {
	mu    sync.Mutex
	fail  error
	set   map[netip.Addr]ForwardedVIP
	all   []netip.AddrPort // every backend ever forwarded
	calls int
	ended []FlowFilter
}

func (r *recordingForwarder) SetForwardedVIP(f ForwardedVIP) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail != nil {
		return r.fail
	}
	r.set[f.VIP] = f
	for _, p := range f.Ports {
		r.all = append(r.all, p.Backends...)
	}
	return nil
}

func (r *recordingForwarder) DeleteForwardedVIP(vip netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.set, vip)
	return nil
}

func (r *recordingForwarder) EndFlows(f FlowFilter) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, f)
	return 1, nil
}

func (r *recordingForwarder) backends(vip netip.Addr) []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.set[vip]
	if !ok || len(f.Ports) == 0 {
		return nil
	}
	return f.Ports[0].Backends
}

func (r *recordingForwarder) endedFlows() []FlowFilter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ended)
}

// TestKernelPathFollowsHealthAndDrains: the balancer keeps the router's
// kernel path in step with its own view: a backend joins it when healthy
// and leaves it when its checks fail; a removed backend's flows are ended
// after the drain timeout (not before), a re-added address's are not; the
// listener reports the kernel path; a router that fails is retried and
// reported meanwhile while the proxy serves; removing the load balancer
// deletes the VIP and ends its flows.
func TestKernelPathFollowsHealthAndDrains(t *testing.T) {
	fw := &recordingForwarder{set: map[netip.Addr]ForwardedVIP{}}
	drain := 600 * time.Millisecond
	p := New(context.Background(), Options{HealthInterval: 50 * time.Millisecond, HealthTimeout: 200 * time.Millisecond,
		DrainTimeout: drain, Forwarder: fw})
	t.Cleanup(p.Close)
	a := startBackend(t, "a", randomLoopback(), 0)
	b := startBackend(t, "b", randomLoopback(), a.port())
	vip := randomLoopback()
	port := freePort(t, vip)
	cfg := Config{Name: "lb", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: a.port()}},
		Backends:  []api.Backend{{Name: "a", Address: a.ip.String()}, {Name: "b", Address: b.ip.String()}}}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	at := func(be *echoBackend) netip.AddrPort { return netip.AddrPortFrom(be.ip, uint16(a.port())) }
	both := []netip.AddrPort{at(a), at(b)}
	slices.SortFunc(both, netip.AddrPort.Compare)
	waitFor(t, 3*time.Second, "both backends on the kernel path", func() bool { return slices.Equal(fw.backends(vip), both) })
	if h, _ := p.Health("lb"); len(h.Listeners) != 1 || !h.Listeners[0].Kernel {
		t.Errorf("listener health %+v, want Kernel", h.Listeners)
	}

	// A new backend where nothing answers: the proxy takes it until its
	// checks fail (a refused dial moves on), the kernel path never.
	dead := randomLoopback()
	cfg.Backends = append(cfg.Backends, api.Backend{Name: "dead", Address: dead.String()})
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the dead backend out of the proxy's rotation", func() bool { return !backendHealthy(p, "lb", dead) })
	fw.mu.Lock()
	for _, be := range fw.all {
		if be.Addr() == dead {
			t.Errorf("a backend that never passed a check was on the kernel path: %v", be)
		}
	}
	fw.mu.Unlock()
	cfg.Backends = cfg.Backends[:2]
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}

	// b's checks fail: it leaves the kernel path (its flows are not ended:
	// an unhealthy backend's open connections go on, as the proxy's).
	_ = b.ln.Close()
	waitFor(t, 3*time.Second, "b off the kernel path", func() bool { return slices.Equal(fw.backends(vip), []netip.AddrPort{at(a)}) })
	if e := fw.endedFlows(); slices.ContainsFunc(e, func(f FlowFilter) bool { return f.Backend == b.ip }) {
		t.Errorf("flows ended for an unhealthy backend: %+v", e)
	}

	// b removed: its flows end after the drain timeout, not before.
	removed := time.Now()
	cfg.Backends = cfg.Backends[:1]
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	wantEnd := FlowFilter{VIP: vip, Backend: b.ip}
	waitFor(t, 3*time.Second, "b's flows ended", func() bool { return slices.Contains(fw.endedFlows(), wantEnd) })
	if waited := time.Since(removed); waited < drain {
		t.Errorf("b's flows ended %v after its removal, before the drain timeout %v", waited, drain)
	}

	// A changed health check drains a and re-adds the same address (here
	// twice: to an HTTP check and back): its flows are a current
	// backend's and are not ended.
	cfg.HealthCheck = &api.HealthCheck{Type: api.HealthCheckHTTP, Port: a.port(), Path: "/healthz"}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.HealthCheck = nil
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(drain + 300*time.Millisecond)
	waitFor(t, 3*time.Second, "a back on the kernel path", func() bool { return slices.Equal(fw.backends(vip), []netip.AddrPort{at(a)}) })
	if slices.Contains(fw.endedFlows(), FlowFilter{VIP: vip, Backend: a.ip}) {
		t.Error("the flows of a backend re-added at the same address were ended")
	}

	// The router fails: reported in the listener's health, retried, and
	// the proxy still answers.
	fw.mu.Lock()
	fw.fail = errors.New("nft: boom")
	calls := fw.calls
	fw.mu.Unlock()
	cfg.ClientIPAffinity = true
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if h, _ := p.Health("lb"); len(h.Listeners) != 1 || h.Listeners[0].Kernel || h.Listeners[0].KernelError == "" {
		t.Errorf("listener health while the router fails: %+v, want a KernelError and no Kernel", h.Listeners)
	}
	if name, err := ask(netip.AddrPortFrom(vip, uint16(port)), netip.Addr{}); err != nil || name != "a" {
		t.Errorf("the proxy while the kernel path fails: %q, %v", name, err)
	}
	waitFor(t, 4*time.Second, "a retry", func() bool { fw.mu.Lock(); defer fw.mu.Unlock(); return fw.calls >= calls+2 })
	fw.mu.Lock()
	fw.fail = nil
	fw.mu.Unlock()
	waitFor(t, 4*time.Second, "the kernel path back after the retry", func() bool {
		h, _ := p.Health("lb")
		return len(h.Listeners) == 1 && h.Listeners[0].Kernel && h.Listeners[0].KernelError == ""
	})

	// The proxy alone (api.DataPathProxy): off the kernel path, and back.
	cfg.ProxyOnly = true
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if got := fw.backends(vip); got != nil {
		t.Errorf("proxy only: the router still forwards %v", got)
	}
	if h, _ := p.Health("lb"); len(h.Listeners) != 1 || h.Listeners[0].Kernel {
		t.Errorf("proxy only: listener health %+v, want no Kernel", h.Listeners)
	}
	cfg.ProxyOnly = false
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if got := fw.backends(vip); !slices.Equal(got, []netip.AddrPort{at(a)}) {
		t.Errorf("kernel path again: the router forwards %v, want a", got)
	}

	// Removed: the VIP leaves the router and its flows end at once.
	p.Remove("lb")
	if got := fw.backends(vip); got != nil {
		t.Errorf("after Remove the router still forwards %v", got)
	}
	if !slices.Contains(fw.endedFlows(), FlowFilter{VIP: vip}) {
		t.Errorf("after Remove the VIP's flows were not ended: %+v", fw.endedFlows())
	}
}
