package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// backend is one target of a load balancer.
type backend struct {
	name  string
	addr  netip.Addr
	check checkSpec // a change restarts the checks

	healthy atomic.Bool
	// lastOK: its latest check passed (true without checks). The kernel
	// path takes only such backends (kernelReady): the proxy hides a
	// backend that refuses by dialing the next one, the kernel cannot.
	lastOK      atomic.Bool
	draining    atomic.Bool
	activeConns atomic.Int64

	conns    connSet
	lastDial atomic.Pointer[portAddr]

	mu          sync.Mutex
	lastError   string
	lastChecked time.Time
	stop        chan struct{}
	stopOnce    sync.Once
}

func newBackend(name string, addr netip.Addr, check checkSpec) *backend {
	be := &backend{name: name, addr: addr, check: check, stop: make(chan struct{})}
	// New backends take traffic until a check says otherwise, as a cloud LB
	// does for hosts it was just given; the first check runs at once.
	be.healthy.Store(true)
	return be
}

// portAddr is a backend's "ip:port" for one port.
type portAddr struct {
	port int
	addr string
}

// dialAddr is "ip:port" to dial, kept for the last port asked (all of a
// listener's connections go to the same one).
func (be *backend) dialAddr(port int) string {
	if a := be.lastDial.Load(); a != nil && a.port == port {
		return a.addr
	}
	a := &portAddr{port: port, addr: net.JoinHostPort(be.addr.String(), strconv.Itoa(port))}
	be.lastDial.Store(a)
	return a.addr
}

func (be *backend) status() api.BackendHealth {
	be.mu.Lock()
	defer be.mu.Unlock()
	return api.BackendHealth{
		Name: be.name, Address: be.addr.String(), Healthy: be.healthy.Load(), Draining: be.draining.Load(),
		LastError: be.lastError, LastChecked: be.lastChecked, ActiveConns: be.activeConns.Load(),
	}
}

// track registers a proxied connection; it returns false if the backend's
// connections were already closed (its load balancer is gone).
func (be *backend) track(client, server net.Conn) bool {
	if !be.conns.add(client, server) {
		return false
	}
	be.activeConns.Add(1)
	return true
}

func (be *backend) untrack(c net.Conn) {
	if be.conns.remove(c) {
		be.activeConns.Add(-1)
	}
}

func (be *backend) closeConns() {
	be.activeConns.Add(-int64(be.conns.closeAll()))
}

func (be *backend) stopChecks() { be.stopOnce.Do(func() { close(be.stop) }) }

// drain takes a removed (or replaced, after a health-check change) backend
// out of rotation; its open connections may finish for DrainTimeout, then
// are closed. Called with b.mu held.
func (b *balancer) drain(be *backend) {
	be.stopChecks()
	be.draining.Store(true)
	// The router's flows to it too, unless it is a backend again by then
	// (a changed health check drains and re-adds the same address).
	b.endFlowsLater(slices.Clone(b.cfg.VIPs), FlowFilter{Backend: be.addr}, func() bool {
		return b.closed || b.hasBackendAt(be.addr)
	})
	if be.activeConns.Load() == 0 {
		return
	}
	b.draining[be] = be
	b.logger().V(2).Info("Draining backend", "backend", be.addr, "conns", be.activeConns.Load())
	go func() {
		deadline := time.NewTimer(b.opts.DrainTimeout)
		defer deadline.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for be.activeConns.Load() > 0 {
			select {
			case <-deadline.C:
				be.closeConns()
			case <-tick.C:
			}
		}
		b.mu.Lock()
		delete(b.draining, be)
		b.mu.Unlock()
	}()
}

// checkSpec is how one backend is probed: kind "http" (GET path on port
// must answer 200), "tcp" (connect to port) or "none".
type checkSpec struct {
	kind string
	port int
	path string
}

func healthCheckKey(cfg Config) checkSpec {
	if hc := cfg.HealthCheck; hc != nil && hc.Type == api.HealthCheckHTTP {
		return checkSpec{kind: "http", port: hc.Port, path: hc.Path}
	}
	for _, l := range cfg.Listeners {
		if l.Protocol == api.ProtocolTCP && l.BackendPort != 0 {
			return checkSpec{kind: "tcp", port: l.BackendPort}
		}
	}
	// UDP only or routed (no backend port), without an HTTP check:
	// nothing to probe.
	return checkSpec{kind: "none"}
}

// runHealthChecks probes be until it is removed; Fall failures in a row
// take it out of rotation, Rise successes bring it back.
func (b *balancer) runHealthChecks(be *backend) {
	if be.check.kind == "none" || b.opts.NoHealthChecks {
		if be.lastOK.Swap(true) != true {
			b.checkResultChanged()
		}
		return
	}
	client := &http.Client{
		Timeout: b.opts.HealthTimeout, Transport: &http.Transport{DisableKeepAlives: true},
		// A redirect is not a healthy answer (kube-proxy's health check
		// answers 200 or 503): following it could count another server's 200.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var fails, oks int
	ticker := time.NewTicker(b.opts.HealthInterval)
	defer ticker.Stop()
	for {
		err := b.probe(client, be)
		be.mu.Lock()
		be.lastChecked = time.Now()
		if err != nil {
			be.lastError = err.Error()
		} else {
			be.lastError = ""
		}
		be.mu.Unlock()
		if ok := err == nil; be.lastOK.Swap(ok) != ok {
			b.checkResultChanged()
		}
		if err != nil {
			fails, oks = fails+1, 0
			if fails == b.opts.Fall && be.healthy.Load() {
				b.setHealth(be, false, err)
			}
		} else {
			fails, oks = 0, oks+1
			if oks == b.opts.Rise && !be.healthy.Load() {
				b.setHealth(be, true, nil)
			}
		}
		select {
		case <-be.stop:
			return
		case <-ticker.C:
		}
	}
}

func (b *balancer) setHealth(be *backend, healthy bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if be.draining.Load() || b.closed {
		return
	}
	be.healthy.Store(healthy)
	b.refreshReady()
	b.logger().Info("Backend health changed", "backend", be.addr, "healthy", healthy, "err", err)
}

func (b *balancer) probe(client *http.Client, be *backend) error {
	if b.opts.poweredOff.has(be.addr) {
		return errPoweredOff
	}
	target := net.JoinHostPort(be.addr.String(), strconv.Itoa(be.check.port))
	if be.check.kind == "tcp" {
		c, err := net.DialTimeout("tcp", target, b.opts.HealthTimeout)
		if err != nil {
			return err
		}
		return c.Close()
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.HealthTimeout)
	defer cancel()
	url := "http://" + target + be.check.path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func sortBackends(bs []*backend) {
	sort.Slice(bs, func(i, j int) bool { return bs[i].addr.Less(bs[j].addr) })
}

// hasBackendAt reports whether a current backend has addr (b.mu held).
func (b *balancer) hasBackendAt(addr netip.Addr) bool {
	for _, be := range b.backends {
		if be.addr == addr {
			return true
		}
	}
	return false
}
