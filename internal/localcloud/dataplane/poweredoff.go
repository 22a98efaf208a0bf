package dataplane

import (
	"errors"
	"net/netip"
	"sync"
)

// errPoweredOff is what a check of a stopped instance's address gets: a
// stopped machine answers nothing.
var errPoweredOff = errors.New("instance is stopped: nothing answers at its address")

// addrSet holds the addresses of stopped instances.
type addrSet struct {
	mu    sync.RWMutex
	addrs map[netip.Addr]bool
}

func (s *addrSet) has(a netip.Addr) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.addrs[a]
}

// SetPoweredOff marks addresses as those of a stopped instance (off) or a
// running one: health checks of backends at them fail at once, so load
// balancers take them out of rotation as a cloud does for a stopped VM.
// The local cloud clears them when the instance starts or is deleted (its
// addresses may then be given to another instance).
func (p *Plane) SetPoweredOff(addrs []netip.Addr, off bool) {
	s := p.opts.poweredOff
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addrs {
		if off {
			s.addrs[a] = true
		} else {
			delete(s.addrs, a)
		}
	}
}

// PoweredOff reports whether addr is marked as a stopped instance's.
func (p *Plane) PoweredOff(addr netip.Addr) bool { return p.opts.poweredOff.has(addr) }
