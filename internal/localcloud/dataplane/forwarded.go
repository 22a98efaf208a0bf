package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// The kernel path of a proxied load balancer. Where the cloud has a VPC
// router (real machines), the proxy's hop (accept, dial the backend's
// port, copy both ways) is done by the router's netfilter instead for the
// clients it covers: a new flow to a VIP's listener port is rewritten to
// a healthy backend's address and port, its source to the router's uplink
// address, so the backend sees a source outside the machines' network, as
// the proxy's dial from the host gives it. Per flow this
// saves two sockets, two goroutine wake-ups per round trip and every copy
// (docs/benchmarks.md). The proxy's listeners stay open behind it and
// serve what the kernel path leaves to them: clients outside the source
// ranges (refused there), a VIP whose family has no backend of its own (a
// family the kernel cannot translate), and everything while the router
// cannot be programmed (the error is in the listener's health and retried
// with backoff). The health checks, the choice of ready backends and the
// drain timeout are the proxy's own, applied to the kernel's flows too:
// a removed backend's flows may finish for DrainTimeout, then the router
// ends them (EndFlows), as the proxy closes its connections.

// ForwardedVIP is one VIP of a proxied load balancer as the router
// rewrites it.
type ForwardedVIP struct {
	VIP      netip.Addr
	Ports    []ForwardedPort
	Sources  []netip.Prefix
	Affinity bool
}

// ForwardedPort is a listener of a forwarded VIP: its new flows go to one
// of Backends (sorted); none: the listener is left to the proxy.
type ForwardedPort struct {
	Protocol string
	Port     int
	Backends []netip.AddrPort
}

// FlowFilter selects the router's flows of a VIP to end; zero fields
// match anything.
type FlowFilter struct {
	VIP         netip.Addr
	Protocol    string
	Port        uint16
	Backend     netip.Addr
	BackendPort uint16
}

// ErrNotForwardable is a VIPForwarder's answer for a VIP it cannot take
// (a backend outside its network): the proxy serves the VIP, and the
// balancer does not retry until the VIP's configuration changes.
var ErrNotForwardable = errors.New("not forwardable")

// VIPForwarder programs the kernel path: the local cloud's VPC router.
type VIPForwarder interface {
	SetForwardedVIP(ForwardedVIP) error
	DeleteForwardedVIP(vip netip.Addr) error
	EndFlows(FlowFilter) (int, error)
}

// forwardedVIPs is what the router must do for cfg with ready backends:
// per VIP, each listener port with the ready backends of the VIP's family
// at the listener's backend port. A VIP with no ready backend of its own
// family gets no backends (the proxy serves it from the other family, or
// refuses).
func forwardedVIPs(cfg Config, ready []netip.Addr) []ForwardedVIP {
	var out []ForwardedVIP
	for _, vip := range cfg.VIPs {
		f := ForwardedVIP{VIP: vip, Ports: []ForwardedPort{}, Sources: slices.Clone(cfg.SourceRanges), Affinity: cfg.ClientIPAffinity}
		var own []netip.Addr
		for _, a := range ready {
			if a.Is4() == vip.Is4() {
				own = append(own, a)
			}
		}
		slices.SortFunc(own, netip.Addr.Compare)
		for _, l := range cfg.Listeners {
			if l.BackendPort <= 0 || l.BackendPort > 65535 || slices.ContainsFunc(f.Ports, func(p ForwardedPort) bool {
				return strings.EqualFold(p.Protocol, l.Protocol) && p.Port == l.Port
			}) {
				continue
			}
			p := ForwardedPort{Protocol: l.Protocol, Port: l.Port, Backends: []netip.AddrPort{}}
			for _, a := range own {
				p.Backends = append(p.Backends, netip.AddrPortFrom(a, uint16(l.BackendPort)))
			}
			f.Ports = append(f.Ports, p)
		}
		out = append(out, f)
	}
	return out
}

func sameForwardedVIP(a, b ForwardedVIP) bool {
	return a.VIP == b.VIP && a.Affinity == b.Affinity && slices.Equal(a.Sources, b.Sources) &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y ForwardedPort) bool {
			return x.Protocol == y.Protocol && x.Port == y.Port && slices.Equal(x.Backends, y.Backends)
		})
}

// kernelReady reports whether the kernel path may send new flows to a
// backend: in the proxy's rotation (healthy: Rise checks in a row passed,
// or new and not yet failed Fall times) and its latest check passed. The
// proxy takes a new backend at once and keeps a failing one until its
// Fall-th failure, because a refused dial moves it to the next backend;
// the kernel's rewrite has no second try, so it waits for a first pass and
// lets go at the first failure, leaving no window where a new flow is sent
// where the last check failed.
func kernelReady(healthy, lastOK bool) bool { return healthy && lastOK }

// checkResultChanged reprograms the kernel path after a backend's latest
// check changed its result (not under b.mu).
func (b *balancer) checkResultChanged() {
	if b.opts.Forwarder == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		_ = b.programForwards() // logged and retried there
	}
}

// changedBackendPorts are the listeners whose backend port changed from
// old to cfg (a Service's NodePort changed): the flows to the old port
// are ended after the drain timeout, as the proxy's connections are.
func changedBackendPorts(old, cfg []api.Listener) []FlowFilter {
	var out []FlowFilter
	for _, o := range old {
		for _, n := range cfg {
			if o.Protocol == n.Protocol && o.Port == n.Port && o.BackendPort != n.BackendPort && o.BackendPort > 0 && o.BackendPort <= 65535 {
				out = append(out, FlowFilter{Protocol: o.Protocol, Port: uint16(o.Port), BackendPort: uint16(o.BackendPort)})
			}
		}
	}
	return out
}

// programForwards brings the router in line with the load balancer's
// forwarded VIPs (b.mu held): every VIP while proxied, none when routed or
// closed. A failure leaves the proxy serving and is retried with backoff.
func (b *balancer) programForwards() error {
	fw := b.opts.Forwarder
	if fw == nil {
		return nil
	}
	var want []ForwardedVIP
	if !b.isRouted && !b.closed && !b.cfg.ProxyOnly {
		var ready []netip.Addr
		for _, be := range *b.ready.Load() {
			if kernelReady(be.healthy.Load(), be.lastOK.Load()) {
				ready = append(ready, be.addr)
			}
		}
		want = forwardedVIPs(b.cfg, ready)
	}
	var errs []error
	keep := map[netip.Addr]bool{}
	for _, f := range want {
		keep[f.VIP] = true
		if prev, ok := b.forwards[f.VIP]; ok && sameForwardedVIP(prev, f) {
			continue
		}
		if prev, ok := b.unforwardable[f.VIP]; ok && sameForwardedVIP(prev, f) {
			continue // refused as it is: the proxy serves it
		}
		delete(b.unforwardable, f.VIP)
		if err := fw.SetForwardedVIP(f); err != nil {
			if errors.Is(err, ErrNotForwardable) {
				// Left to the proxy for good: no retry, no error, but
				// the router must not keep an older version of it.
				b.unforwardable[f.VIP] = f
				b.logger().V(2).Info("VIP left to the proxy", "vip", f.VIP, "reason", err.Error())
				if _, ok := b.forwards[f.VIP]; ok {
					if err := fw.DeleteForwardedVIP(f.VIP); err != nil {
						errs = append(errs, fmt.Errorf("kernel path for VIP %s: %w", f.VIP, err))
						continue
					}
					delete(b.forwards, f.VIP)
				}
				continue
			}
			errs = append(errs, fmt.Errorf("kernel path for VIP %s: %w", f.VIP, err))
			delete(b.forwards, f.VIP)
			continue
		}
		b.forwards[f.VIP] = f
	}
	for vip := range b.unforwardable {
		if !keep[vip] {
			delete(b.unforwardable, vip)
		}
	}
	for vip := range b.forwards {
		if keep[vip] {
			continue
		}
		if err := fw.DeleteForwardedVIP(vip); err != nil {
			errs = append(errs, fmt.Errorf("kernel path for VIP %s: %w", vip, err))
			continue
		}
		delete(b.forwards, vip)
	}
	b.forwardErr = errors.Join(errs...)
	if b.forwardErr != nil {
		b.logger().Error(b.forwardErr, "Programming the kernel path failed; the proxy serves the VIPs meanwhile")
		b.retryForwards()
	} else {
		b.forwardRetry = 0
	}
	return b.forwardErr
}

// retryForwards programs the router again later (b.mu held): 1 s, doubling
// to a minute, once at a time.
func (b *balancer) retryForwards() {
	if b.forwardRetryPending {
		return
	}
	b.forwardRetry = min(max(2*b.forwardRetry, time.Second), time.Minute)
	b.forwardRetryPending = true
	time.AfterFunc(b.forwardRetry, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.forwardRetryPending = false
		if b.forwardErr != nil && !b.closed {
			_ = b.programForwards()
		}
	})
}

// endFlowsLater ends the router's flows that f selects on each of vips
// after the drain timeout, unless skip (called then, with b.mu held) says
// they are a current backend's again.
func (b *balancer) endFlowsLater(vips []netip.Addr, f FlowFilter, skip func() bool) {
	fw := b.opts.Forwarder
	if fw == nil {
		return
	}
	time.AfterFunc(b.opts.DrainTimeout, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if skip != nil && skip() {
			return
		}
		b.endFlows(vips, f)
	})
}

// endFlows ends the router's flows f selects on each of vips now.
func (b *balancer) endFlows(vips []netip.Addr, f FlowFilter) {
	fw := b.opts.Forwarder
	if fw == nil {
		return
	}
	for _, vip := range vips {
		f.VIP = vip
		n, err := fw.EndFlows(f)
		if err != nil {
			b.logger().Error(err, "Ending the kernel path's flows failed", "vip", vip)
			continue
		}
		if n > 0 {
			b.logger().V(2).Info("Ended the kernel path's flows", "vip", vip, "backend", f.Backend, "backendPort", f.BackendPort, "flows", n)
		}
	}
}

// forwardStatus marks the listeners the router forwards (b.mu held).
func (b *balancer) forwardStatus(ls *api.ListenerHealth) {
	if b.opts.Forwarder == nil {
		return
	}
	at, err := netip.ParseAddrPort(ls.Address)
	if err != nil {
		return
	}
	f, ok := b.forwards[at.Addr()]
	if !ok {
		if b.forwardErr != nil {
			ls.KernelError = b.forwardErr.Error()
		}
		return
	}
	for _, p := range f.Ports {
		if strings.EqualFold(p.Protocol, ls.Protocol) && p.Port == int(at.Port()) && len(p.Backends) > 0 {
			ls.Kernel = true
		}
	}
}
