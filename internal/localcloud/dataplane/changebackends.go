package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// ChangeBackends removes, then adds, backends of a load balancer without
// touching the others: a node joining or leaving costs the data plane work
// for that node only. Removed backends drain as in Apply; adding one it has
// (same address) only renames it; a removal with a name removes only a
// backend of that name.
func (p *Plane) ChangeBackends(name string, add, remove []api.Backend) error {
	p.mu.Lock()
	lb, ok := p.lbs[name]
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("load balancer %q is not in the data plane", name)
	}
	lb.changeBackends(add, remove)
	return nil
}

func (b *balancer) changeBackends(add, remove []api.Backend) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, r := range remove {
		// A named removal is for that node's backend only: another node
		// given the address since keeps its own (api.ChangeBackendsRequest).
		if be, ok := b.backends[r.Address]; ok && (r.Name == "" || be.name == "" || r.Name == be.name) {
			delete(b.backends, r.Address)
			b.drain(be)
		}
	}
	check := healthCheckKey(b.cfg)
	for _, a := range add {
		if be, ok := b.backends[a.Address]; ok {
			be.name = a.Name
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue // validated by the API server
		}
		be := newBackend(a.Name, ip, check)
		b.backends[a.Address] = be
		go b.runHealthChecks(be)
	}
	b.refreshReady()
}
