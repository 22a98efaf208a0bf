// Package dataplane is the local cloud's L4 load-balancer data plane: each
// load balancer listens on its VIPs (loopback addresses) and forwards TCP
// and UDP to healthy backends, enforcing source ranges, health-checking the
// backends and draining the connections of removed ones. A load balancer
// without backend ports is routed instead (routed.go): the VPC router
// forwards its VIPs to the healthy backends.
package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Options tune the data plane; zero values take the defaults.
type Options struct {
	// HealthInterval between checks of one backend (default 1s).
	HealthInterval time.Duration
	// HealthTimeout of one check (default 1s).
	HealthTimeout time.Duration
	// Fall consecutive failures mark a backend unhealthy (default 2);
	// Rise consecutive successes mark it healthy again (default 2).
	Fall, Rise int
	// DrainTimeout is how long connections to a removed backend may
	// continue before they are closed (default 30s).
	DrainTimeout time.Duration
	// UDPIdleTimeout ends a UDP flow after this much silence (default 60s).
	UDPIdleTimeout time.Duration
	// DialTimeout to a backend (default 2s).
	DialTimeout time.Duration
	// MaxConnsPerLoadBalancer and MaxConns cap open TCP connections per
	// load balancer (default 10000) and in all (default 50000); a
	// connection over a cap is closed at once. < 0: no cap.
	MaxConnsPerLoadBalancer, MaxConns int
	// MaxUDPFlowsPerLoadBalancer and MaxUDPFlows cap UDP flows the same way
	// (defaults 10000, 50000); datagrams that would open a flow over a cap
	// are dropped. < 0: no cap.
	MaxUDPFlowsPerLoadBalancer, MaxUDPFlows int
	// NoHealthChecks treats every backend as healthy and runs no checks:
	// for control-plane benchmarks with hundreds of thousands of backends.
	NoHealthChecks bool

	// Listen and ListenPacket, when set, open the VIPs' sockets (TCP and
	// UDP): a cloud with real machines serves its VIPs inside its VPC's
	// router namespace, where pods and the host both reach them.
	Listen       func(network, addr string) (net.Listener, error)
	ListenPacket func(network, addr string) (net.PacketConn, error)
	// Router, when set, serves load balancers without backend ports by
	// routing their VIPs to the backends (routed.go).
	Router VIPRouter
	// Forwarder, when set, takes the proxied load balancers' flows onto
	// the kernel path (forwarded.go); the listeners serve the rest.
	Forwarder VIPForwarder

	// poweredOff is the Plane's set of stopped instances' addresses.
	poweredOff *addrSet

	// listenTCP replaces net.ListenTCP in tests (to inject accept errors).
	listenTCP func(*net.TCPAddr) (tcpAcceptor, error)
	// dialer dials backends (one for all, with DialTimeout).
	dialer *net.Dialer
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.HealthInterval, time.Second)
	def(&o.HealthTimeout, time.Second)
	def(&o.DrainTimeout, 30*time.Second)
	def(&o.UDPIdleTimeout, 60*time.Second)
	def(&o.DialTimeout, 2*time.Second)
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	defInt(&o.MaxConnsPerLoadBalancer, 10000)
	defInt(&o.MaxConns, 50000)
	defInt(&o.MaxUDPFlowsPerLoadBalancer, 10000)
	defInt(&o.MaxUDPFlows, 50000)
	// No TCP keep-alive on either side of a proxied connection: both ends
	// are local processes (the kernel resets their connections when they
	// go), and setting it up was 8 setsockopt calls per connection.
	if o.listenTCP == nil {
		o.listenTCP = func(a *net.TCPAddr) (tcpAcceptor, error) {
			if o.Listen != nil {
				ln, err := o.Listen("tcp", a.String())
				if err != nil {
					return nil, err
				}
				return ln.(*net.TCPListener), nil
			}
			ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", a.String())
			if err != nil {
				return nil, err
			}
			return ln.(*net.TCPListener), nil
		}
	}
	o.dialer = &net.Dialer{Timeout: o.DialTimeout, KeepAlive: -1}
	if o.Fall == 0 {
		o.Fall = 2
	}
	if o.Rise == 0 {
		o.Rise = 2
	}
}

// Config is the desired state of one load balancer.
type Config struct {
	Name             string
	VIPs             []netip.Addr
	Listeners        []api.Listener
	Backends         []api.Backend
	SourceRanges     []netip.Prefix
	HealthCheck      *api.HealthCheck
	ClientIPAffinity bool
	// ProxyOnly keeps every flow in the proxy, off the kernel path
	// (api.DataPathProxy).
	ProxyOnly bool
}

// Plane runs the load balancers of one local cloud.
type Plane struct {
	opts Options
	ctx  context.Context

	// conns and flows count TCP connections and UDP flows of all load
	// balancers, against MaxConns and MaxUDPFlows.
	conns, flows limiter

	mu  sync.Mutex
	lbs map[string]*balancer
}

// New returns an empty data plane; ctx carries the logger.
func New(ctx context.Context, opts Options) *Plane {
	opts.defaults()
	opts.poweredOff = &addrSet{addrs: map[netip.Addr]bool{}}
	p := &Plane{opts: opts, ctx: ctx, lbs: map[string]*balancer{}}
	p.conns.max, p.flows.max = int64(opts.MaxConns), int64(opts.MaxUDPFlows)
	return p
}

// Apply creates or updates a load balancer. Listeners that cannot bind are
// reported in the error; the others keep serving.
func (p *Plane) Apply(cfg Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	lb, ok := p.lbs[cfg.Name]
	if !ok {
		logger := klog.FromContext(p.ctx).WithValues("loadBalancer", cfg.Name)
		lb = newBalancer(klog.NewContext(p.ctx, logger), cfg.Name, p.opts, &p.conns, &p.flows)
		p.lbs[cfg.Name] = lb
	}
	return lb.apply(cfg)
}

// Remove stops a load balancer: its listeners close at once and its open
// connections and UDP flows are closed.
func (p *Plane) Remove(name string) {
	p.mu.Lock()
	lb := p.lbs[name]
	delete(p.lbs, name)
	p.mu.Unlock()
	if lb != nil {
		lb.close()
	}
}

// Health reports the backends of a load balancer as the data plane sees them.
func (p *Plane) Health(name string) (api.LoadBalancerHealth, bool) {
	p.mu.Lock()
	lb := p.lbs[name]
	p.mu.Unlock()
	if lb == nil {
		return api.LoadBalancerHealth{}, false
	}
	return lb.health(), true
}

// Close stops every load balancer.
func (p *Plane) Close() {
	p.mu.Lock()
	lbs := p.lbs
	p.lbs = map[string]*balancer{}
	p.mu.Unlock()
	for _, lb := range lbs {
		lb.close()
	}
}

func (b *balancer) health() api.LoadBalancerHealth {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := api.LoadBalancerHealth{Name: b.name, Serving: len(b.listeners) > 0}
	if b.isRouted {
		h.Listeners = b.routedStatus()
		h.Serving = len(h.Listeners) > 0
		for _, l := range h.Listeners {
			h.Serving = h.Serving && l.Serving
		}
	}
	if b.refusing {
		for _, vip := range b.cfg.VIPs {
			for _, l := range b.cfg.Listeners {
				h.Listeners = append(h.Listeners, api.ListenerHealth{Protocol: l.Protocol,
					Address: netip.AddrPortFrom(vip, uint16(l.Port)).String(), LastError: RefusingReason})
			}
		}
	}
	for _, pl := range b.listeners {
		ls := pl.status()
		b.forwardStatus(&ls)
		h.Serving = h.Serving && ls.Serving
		h.Listeners = append(h.Listeners, ls)
	}
	sort.Slice(h.Listeners, func(i, j int) bool {
		return h.Listeners[i].Protocol+h.Listeners[i].Address < h.Listeners[j].Protocol+h.Listeners[j].Address
	})
	for _, be := range b.backends {
		h.Backends = append(h.Backends, be.status())
	}
	for _, be := range b.draining {
		h.Backends = append(h.Backends, be.status())
	}
	sort.Slice(h.Backends, func(i, j int) bool { return h.Backends[i].Address < h.Backends[j].Address })
	return h
}

func listenerKey(proto string, vip netip.Addr, port int) string {
	return fmt.Sprintf("%s/%s", proto, netip.AddrPortFrom(vip, uint16(port)))
}
