package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// A load balancer for a Service without NodePorts
// (allocateLoadBalancerNodePorts: false) has no port on the nodes to
// forward to, so a user-space proxy cannot serve it. It is routed instead:
// the VPC's router forwards the packets of its listener ports, addressed to
// the VIP unchanged, to one of the healthy backends (hashed per flow), and
// kube-proxy on that node serves the VIP (ipMode VIP) as it serves a
// ClusterIP. The client's address reaches the pod, UDP and TCP alike, and
// what a listener does not cover, a source range excludes or no healthy
// backend takes reaches the router's own stack, which refuses it.

// RefusingReason is a listener's health error while no backend is ready:
// it refuses connections on purpose (proxied or routed).
const RefusingReason = "no healthy backend: connections are refused"

// RoutedVIP is one VIP of a routed load balancer as the router must
// forward it.
type RoutedVIP struct {
	VIP netip.Addr
	// Ports are the listener ports forwarded ("TCP"/"UDP", port).
	Ports []RoutedPort
	// Sources are the client ranges forwarded; empty: every client.
	Sources []netip.Prefix
	// Via are the healthy backends' addresses of the VIP's family, sorted;
	// empty: nothing is forwarded (every packet is refused).
	Via []netip.Addr
}

// RoutedPort is a listener of a routed VIP.
type RoutedPort struct {
	Protocol string
	Port     int
}

// VIPRouter programs routed VIPs: the local cloud's VPC router, where real
// machines are the backends. Without one, a routed load balancer cannot
// be served (the API refuses it).
type VIPRouter interface {
	SetRoutedVIP(RoutedVIP) error
	DeleteRoutedVIP(vip netip.Addr) error
}

// routed reports whether a load balancer is routed: a listener without a
// backend port has nothing a proxy could forward to. One such listener
// routes them all, since routing is per VIP; kube-proxy serves every port
// of the VIP on the node.
func routed(listeners []api.Listener) bool {
	return slices.ContainsFunc(listeners, func(l api.Listener) bool { return l.BackendPort == 0 })
}

// routedVIPs is what the router must do for cfg with ready backends: one
// entry per VIP, each with the listener ports, the source ranges and the
// backends of its own family.
func routedVIPs(cfg Config, ready []netip.Addr) []RoutedVIP {
	var out []RoutedVIP
	for _, vip := range cfg.VIPs {
		r := RoutedVIP{VIP: vip, Ports: []RoutedPort{}, Sources: []netip.Prefix{}, Via: []netip.Addr{}}
		for _, l := range cfg.Listeners {
			p := RoutedPort{Protocol: l.Protocol, Port: l.Port}
			if !slices.Contains(r.Ports, p) {
				r.Ports = append(r.Ports, p)
			}
		}
		for _, s := range cfg.SourceRanges {
			if s.Addr().Is4() == vip.Is4() {
				r.Sources = append(r.Sources, s)
			}
		}
		if len(cfg.SourceRanges) > 0 && len(r.Sources) == 0 {
			// Ranges were given, none of this family: no client of it is
			// allowed, so nothing is forwarded (not everyone).
			out = append(out, RoutedVIP{VIP: vip, Ports: r.Ports, Sources: []netip.Prefix{}, Via: []netip.Addr{}})
			continue
		}
		for _, a := range ready {
			if a.Is4() == vip.Is4() {
				r.Via = append(r.Via, a)
			}
		}
		slices.SortFunc(r.Via, netip.Addr.Compare)
		out = append(out, r)
	}
	return out
}

// programRoutes brings the router in line with the load balancer's
// routed VIPs (b.mu held). VIPs no longer routed are deleted.
func (b *balancer) programRoutes() error {
	rt := b.opts.Router
	if rt == nil {
		return errors.New("this data plane routes no VIPs: a load balancer without backend ports needs a cloud with real machines")
	}
	var want []RoutedVIP
	if b.isRouted && !b.closed {
		var ready []netip.Addr
		for _, be := range *b.ready.Load() {
			ready = append(ready, be.addr)
		}
		want = routedVIPs(b.cfg, ready)
	}
	var errs []error
	keep := map[netip.Addr]bool{}
	for _, r := range want {
		keep[r.VIP] = true
		if prev, ok := b.routes[r.VIP]; ok && sameRoutedVIP(prev, r) {
			continue
		}
		if err := rt.SetRoutedVIP(r); err != nil {
			errs = append(errs, fmt.Errorf("routing VIP %s: %w", r.VIP, err))
			delete(b.routes, r.VIP)
			continue
		}
		b.routes[r.VIP] = r
	}
	for vip := range b.routes {
		if keep[vip] {
			continue
		}
		if err := rt.DeleteRoutedVIP(vip); err != nil {
			errs = append(errs, fmt.Errorf("unrouting VIP %s: %w", vip, err))
			continue
		}
		delete(b.routes, vip)
	}
	b.routeErr = errors.Join(errs...)
	return b.routeErr
}

func sameRoutedVIP(a, b RoutedVIP) bool {
	return a.VIP == b.VIP && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Sources, b.Sources) && slices.Equal(a.Via, b.Via)
}

// routedStatus is the listeners' health of a routed load balancer: a
// listener serves while its VIP's route is programmed (b.mu held).
func (b *balancer) routedStatus() []api.ListenerHealth {
	var out []api.ListenerHealth
	for _, vip := range b.cfg.VIPs {
		r, ok := b.routes[vip]
		for _, l := range b.cfg.Listeners {
			h := api.ListenerHealth{Protocol: l.Protocol, Address: netip.AddrPortFrom(vip, uint16(l.Port)).String(), Serving: ok}
			if !ok && b.routeErr != nil {
				h.LastError = b.routeErr.Error()
			}
			if ok && len(r.Via) == 0 {
				h.LastError = RefusingReason
			}
			out = append(out, h)
		}
	}
	return out
}
