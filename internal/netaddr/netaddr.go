// Package netaddr holds prefix arithmetic that net/netip lacks, shared by
// the route controller and the local cloud's route index.
package netaddr

import "net/netip"

// Last returns the last address of p (all host bits set).
func Last(p netip.Prefix) netip.Addr {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := range b {
		hostBits := max(0, min(8, (i+1)*8-p.Bits()))
		b[i] |= byte(1<<hostBits - 1)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
