package dataplane

import (
	"context"
	"errors"
	"hash/fnv"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// balancer is one load balancer: its listeners, backends and health checks.
type balancer struct {
	name string
	opts Options
	ctx  context.Context

	mu        sync.Mutex
	cfg       Config
	listeners map[string]proxyListener
	backends  map[string]*backend // by address
	draining  map[*backend]*backend

	// ready is the current pick set: healthy, not draining, sorted by address.
	ready    atomic.Pointer[[]*backend]
	ranges   atomic.Pointer[[]netip.Prefix]
	rr       atomic.Uint64
	affinity atomic.Bool
	closed   bool

	// isRouted: the VPC router forwards the VIPs to the backends instead
	// of the listeners above (routed.go); routes is what it was told,
	// routeErr its last failure.
	isRouted bool
	routes   map[netip.Addr]RoutedVIP
	routeErr error
	// refusing: proxied, but no backend is ready, so its listeners are
	// closed (syncListeners).
	refusing bool
	// forwards is what the router's kernel path was told per VIP
	// (forwarded.go), forwardErr its last failure, retried after
	// forwardRetry (one retry pending at a time).
	forwards            map[netip.Addr]ForwardedVIP
	unforwardable       map[netip.Addr]ForwardedVIP
	forwardErr          error
	forwardRetry        time.Duration
	forwardRetryPending bool

	// conns and flows count this load balancer's TCP connections and UDP
	// flows; globalConns and globalFlows are the Plane's.
	conns, flows             limiter
	globalConns, globalFlows *limiter
}

// proxyListener is a running TCP or UDP listener.
type proxyListener interface {
	close()
	// closeConns closes its open connections or flows at once.
	closeConns()
	// setBackendPort drains the connections to the previous port.
	setBackendPort(port int)
	status() api.ListenerHealth
}

func newBalancer(ctx context.Context, name string, opts Options, globalConns, globalFlows *limiter) *balancer {
	b := &balancer{name: name, opts: opts, ctx: ctx, listeners: map[string]proxyListener{},
		backends: map[string]*backend{}, draining: map[*backend]*backend{}, routes: map[netip.Addr]RoutedVIP{},
		forwards: map[netip.Addr]ForwardedVIP{}, unforwardable: map[netip.Addr]ForwardedVIP{},
		globalConns: globalConns, globalFlows: globalFlows}
	b.conns.max, b.flows.max = int64(opts.MaxConnsPerLoadBalancer), int64(opts.MaxUDPFlowsPerLoadBalancer)
	b.ready.Store(&[]*backend{})
	b.ranges.Store(&[]netip.Prefix{})
	return b
}

func (b *balancer) apply(cfg Config) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range changedBackendPorts(b.cfg.Listeners, cfg.Listeners) {
		b.endFlowsLater(slices.Clone(cfg.VIPs), f, func() bool {
			return b.closed || slices.ContainsFunc(b.cfg.Listeners, func(l api.Listener) bool {
				return l.Protocol == f.Protocol && l.Port == int(f.Port) && l.BackendPort == int(f.BackendPort)
			})
		})
	}
	b.cfg = cfg
	b.isRouted = routed(cfg.Listeners)
	ranges := append([]netip.Prefix(nil), cfg.SourceRanges...)
	b.ranges.Store(&ranges)
	b.affinity.Store(cfg.ClientIPAffinity)

	// Backends: add new ones, drain removed ones; a changed health check
	// drains the old backend too (its connections were admitted under the
	// old check) and starts a new one.
	want := map[string]api.Backend{}
	for _, be := range cfg.Backends {
		want[be.Address] = be
	}
	for addr, be := range b.backends {
		if _, keep := want[addr]; !keep {
			delete(b.backends, addr)
			b.drain(be)
		}
	}
	for addr, spec := range want {
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			continue // validated by the API server
		}
		be, ok := b.backends[addr]
		if ok && be.check == healthCheckKey(cfg) {
			be.name = spec.Name
			continue
		}
		if ok {
			b.drain(be)
		}
		be = newBackend(spec.Name, ip, healthCheckKey(cfg))
		b.backends[addr] = be
		go b.runHealthChecks(be)
	}
	b.refreshReady()

	var errs []error
	if b.isRouted || len(b.routes) > 0 {
		if err := b.programRoutes(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.syncListeners(true); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncListeners opens and closes the proxy listeners (b.mu held): one per
// VIP × listener port; none when routed (the router forwards the VIPs, and
// its own stack must refuse what it does not forward); and none while no
// backend is ready, so that a client is refused (TCP reset on its SYN,
// ICMP port unreachable for UDP) as with nothing listening, instead of
// being accepted and dropped. Open connections are not touched: they go
// on, or drain, with their backends. With probe (a new config), listeners
// that stay closed are bound once and closed again, so that a port
// another program holds is the load balancer's error now, as it would be
// with backends, not only when a backend becomes ready.
func (b *balancer) syncListeners(probe bool) error {
	open := !b.isRouted && !b.closed && len(*b.ready.Load()) > 0
	var bindErrs []error
	if probe && !open && !b.isRouted && !b.closed {
		for _, vip := range b.cfg.VIPs {
			for _, l := range b.cfg.Listeners {
				if _, ok := b.listeners[listenerKey(l.Protocol, vip, l.Port)]; ok {
					continue // still bound: closed below
				}
				pl, err := b.listen(l.Protocol, netip.AddrPortFrom(vip, uint16(l.Port)), l.BackendPort)
				if err != nil {
					bindErrs = append(bindErrs, err)
					continue
				}
				pl.close()
			}
		}
	}
	wantL := map[string]bool{}
	for _, vip := range b.cfg.VIPs {
		if !open {
			break
		}
		for _, l := range b.cfg.Listeners {
			key := listenerKey(l.Protocol, vip, l.Port)
			wantL[key] = true
			if pl, ok := b.listeners[key]; ok {
				pl.setBackendPort(l.BackendPort)
				continue
			}
			pl, err := b.listen(l.Protocol, netip.AddrPortFrom(vip, uint16(l.Port)), l.BackendPort)
			if err != nil {
				bindErrs = append(bindErrs, err)
				continue
			}
			b.listeners[key] = pl
		}
	}
	for key, pl := range b.listeners {
		if !wantL[key] {
			pl.close()
			delete(b.listeners, key)
		}
	}
	b.refusing = !open && !b.isRouted && !b.closed
	return errors.Join(bindErrs...)
}

func (b *balancer) listen(proto string, addr netip.AddrPort, backendPort int) (proxyListener, error) {
	if proto == api.ProtocolUDP {
		return listenUDP(b, addr, backendPort)
	}
	return listenTCP(b, addr, backendPort)
}

// refreshReady rebuilds the pick set; called with b.mu held or from health
// transitions (which take b.mu).
func (b *balancer) refreshReady() {
	ready := make([]*backend, 0, len(b.backends))
	for _, be := range b.backends {
		if be.healthy.Load() {
			ready = append(ready, be)
		}
	}
	sortBackends(ready)
	b.ready.Store(&ready)
	_ = b.programForwards() // logged and retried there; the proxy serves meanwhile
	if b.isRouted {
		if err := b.programRoutes(); err != nil {
			b.logger().Error(err, "Programming the routed VIPs failed")
		}
		return
	}
	if err := b.syncListeners(false); err != nil {
		b.logger().Error(err, "Opening listeners failed")
	}
}

// allowed reports whether a client address passes the source ranges.
func (b *balancer) allowed(client netip.Addr) bool {
	ranges := *b.ranges.Load()
	if len(ranges) == 0 {
		return true
	}
	client = client.Unmap()
	for _, p := range ranges {
		if p.Contains(client) {
			return true
		}
	}
	return false
}

// pick chooses a backend for a client of a listener on a VIP of family
// vip4 (IPv4 or not): round robin, or by client IP hash with affinity.
// skip excludes backends that already failed this client.
func (b *balancer) pick(vip4 bool, client netip.Addr, skip map[*backend]bool) *backend {
	ready := sameFamily(*b.ready.Load(), vip4)
	if len(ready) == 0 {
		return nil
	}
	var start uint64
	if b.affinity.Load() {
		h := fnv.New64a()
		_, _ = h.Write(client.AsSlice())
		start = h.Sum64()
	} else {
		start = b.rr.Add(1)
	}
	for i := range ready {
		be := ready[(start+uint64(i))%uint64(len(ready))]
		if !skip[be] {
			return be
		}
	}
	return nil
}

// sameFamily is the part of ready (sorted by address, so IPv4 first) of
// the VIP's family, or all of ready when it has none of that family. A
// dual-stack Service's backends hold each node's address of each family:
// its IPv6 listener reaches the nodes over IPv6 (kube-proxy's IPv6
// NodePort), health-checked and drained apart from IPv4, as the routed
// VIPs are; a single-family backend set serves both listeners. It slices,
// never copies: pick runs per connection.
func sameFamily(ready []*backend, vip4 bool) []*backend {
	split := sort.Search(len(ready), func(i int) bool { return !ready[i].addr.Is4() })
	switch {
	case split == 0 || split == len(ready):
		return ready
	case vip4:
		return ready[:split]
	default:
		return ready[split:]
	}
}

func (b *balancer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for key, pl := range b.listeners {
		pl.close()
		pl.closeConns()
		delete(b.listeners, key)
	}
	for addr, be := range b.backends {
		be.stopChecks()
		be.closeConns()
		delete(b.backends, addr)
	}
	for be := range b.draining {
		be.closeConns()
		delete(b.draining, be)
	}
	empty := []*backend{}
	b.ready.Store(&empty)
	// The kernel path's flows end with the load balancer, as the proxy's
	// connections above.
	_ = b.programForwards()
	b.endFlows(b.cfg.VIPs, FlowFilter{})
	if len(b.routes) > 0 {
		if err := b.programRoutes(); err != nil { // closed: deletes them all
			b.logger().Error(err, "Removing the routed VIPs failed")
		}
	}
}

func (b *balancer) logger() klog.Logger { return klog.FromContext(b.ctx) }
