package vpc

import (
	"fmt"
	"net/netip"
	"strings"
)

// Range is an address range the environment uses, with the flag that sets
// it: an overlap is reported naming both, so the user knows what to change.
type Range struct {
	Prefix netip.Prefix
	// Flag is what sets it (e.g. "--node-cidr"), for error messages.
	Flag string
}

// HostNet is a network the host already uses: an address's prefix on one
// of its links, or a route's destination.
type HostNet struct {
	Prefix netip.Prefix
	// Dev is the link (for addresses and routes); Kind is "address" or
	// "route".
	Dev, Kind string
}

// checkRanges refuses ranges that overlap each other or anything the host
// already uses (its own addresses and routes, the default route aside):
// the environment must never capture traffic for a network the machine is
// on, nor send its own traffic towards one. ownDevs are this network's
// own links (left over from an earlier run that was killed): what sits on
// them is ours, not the host's.
func checkRanges(ranges []Range, host []HostNet, ownDevs []string) error {
	for i, a := range ranges {
		if !a.Prefix.IsValid() {
			return fmt.Errorf("%s: no valid address range given", a.Flag)
		}
		if a.Prefix != a.Prefix.Masked() {
			return fmt.Errorf("%s %s: not a network address (did you mean %s?)", a.Flag, a.Prefix, a.Prefix.Masked())
		}
		for _, b := range ranges[i+1:] {
			if a.Prefix.Overlaps(b.Prefix) {
				return fmt.Errorf("%s %s overlaps %s %s: give them ranges apart", a.Flag, a.Prefix, b.Flag, b.Prefix)
			}
		}
		for _, h := range host {
			if h.Prefix.Bits() == 0 || contains(ownDevs, h.Dev) {
				continue
			}
			if a.Prefix.Overlaps(h.Prefix) {
				return fmt.Errorf("%s %s overlaps the host's %s %s on %s: choose another range with %s", a.Flag, a.Prefix, h.Kind, h.Prefix, h.Dev, a.Flag)
			}
		}
	}
	return nil
}

// coveredBy reports the first range of inner not inside any of outer.
func coveredBy(inner []netip.Prefix, outer []Range) (netip.Prefix, bool) {
	for _, p := range inner {
		ok := false
		for _, o := range outer {
			if o.Prefix.Bits() <= p.Bits() && o.Prefix.Contains(p.Addr()) {
				ok = true
				break
			}
		}
		if !ok {
			return p, false
		}
	}
	return netip.Prefix{}, true
}

// uplinkAddrs gives the host's and the router's addresses on the uplink: the
// first two usable addresses of a /30 (or the two of a /31).
func uplinkAddrs(p netip.Prefix) (host, router netip.Addr, err error) {
	if !p.Addr().Is4() || p.Bits() < 29 || p.Bits() > 31 {
		return host, router, fmt.Errorf("uplink %s: want an IPv4 /29, /30 or /31", p)
	}
	base := p.Masked().Addr()
	if p.Bits() == 31 {
		return base, base.Next(), nil
	}
	return base.Next(), base.Next().Next(), nil
}

// uplinkAddrs6 checks an IPv6 subnet and uplink and gives the host's and
// the router's uplink addresses: the uplink's first two after its network
// address.
func uplinkAddrs6(subnet, uplink Range) (host, router netip.Addr, err error) {
	for _, r := range []Range{subnet, uplink} {
		if !r.Prefix.IsValid() || !r.Prefix.Addr().Is6() || r.Prefix.Addr().Is4In6() {
			return host, router, fmt.Errorf("%s %v: a dual-stack VPC needs an IPv6 subnet and an IPv6 uplink", r.Flag, r.Prefix)
		}
	}
	if b := subnet.Prefix.Bits(); b < 64 || b > 120 {
		return host, router, fmt.Errorf("%s %s: want an IPv6 /64 to /120", subnet.Flag, subnet.Prefix)
	}
	if b := uplink.Prefix.Bits(); b < 64 || b > 126 {
		return host, router, fmt.Errorf("%s %s: want an IPv6 /64 to /126", uplink.Flag, uplink.Prefix)
	}
	base := uplink.Prefix.Masked().Addr()
	return base.Next(), base.Next().Next(), nil
}

// gateway is a subnet's gateway: its first usable address, on the router's
// bridge, as in a cloud's VPC.
func gateway(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next() }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ipError makes an ip(8) failure readable: the command and what it said.
func ipError(args []string, out []byte, err error) error {
	return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
}

// Unused reports whether nothing on the host (its addresses and routes,
// the default route aside) overlaps p: a range a new VPC may take.
func Unused(p netip.Prefix) (bool, error) {
	host, err := hostNets()
	if err != nil {
		return false, err
	}
	return checkRanges([]Range{{Prefix: p, Flag: "range"}}, host, nil) == nil, nil
}
