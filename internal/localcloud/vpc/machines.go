package vpc

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Attach plugs machine i's network namespace (a name under /run/netns) into
// the VPC: a veth whose router end is on the bridge and whose machine end
// is the machine's eth0 with addr, its default route via the gateway.
func (nw *Network) Attach(i int, machineNetns string, addr netip.Addr) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if !nw.cfg.Subnet.Prefix.Contains(addr) || addr == nw.gw {
		return fmt.Errorf("machine address %s: not a host address of the VPC subnet %s (gateway %s)", addr, nw.cfg.Subnet.Prefix, nw.gw)
	}
	link := machineLink(nw.cfg.ID, i)
	r := nw.n.router
	if nw.gw6.IsValid() {
		if err := noDAD(machineNetns); err != nil {
			return err
		}
	}
	if err := nw.rec.add(object{Kind: "link", Name: link, Netns: r}); err != nil {
		return err
	}
	for _, s := range [][]string{
		{"-n", r, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", machineNetns},
		{"-n", r, "link", "set", link, "master", nw.n.bridge, "up"},
		{"-n", machineNetns, "link", "set", "lo", "up"},
		{"-n", machineNetns, "addr", "add", prefixOf(addr, nw.cfg.Subnet.Prefix), "dev", "eth0"},
		{"-n", machineNetns, "link", "set", "eth0", "up"},
		{"-n", machineNetns, "route", "add", "default", "via", nw.gw.String()},
	} {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// Attach6 gives machine i, attached already, its IPv6 address addr on
// eth0 and its IPv6 default route via the IPv6 gateway.
func (nw *Network) Attach6(machineNetns string, addr netip.Addr) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if !nw.gw6.IsValid() {
		return fmt.Errorf("machine address %s: the VPC has no IPv6 subnet", addr)
	}
	if !nw.cfg.Subnet6.Prefix.Contains(addr) || addr == nw.gw6 || addr == nw.cfg.Subnet6.Prefix.Masked().Addr() {
		return fmt.Errorf("machine address %s: not a host address of the VPC's IPv6 subnet %s (gateway %s)", addr, nw.cfg.Subnet6.Prefix, nw.gw6)
	}
	for _, s := range [][]string{
		{"-n", machineNetns, "addr", "add", prefixOf(addr, nw.cfg.Subnet6.Prefix), "dev", "eth0", "nodad"},
		{"-n", machineNetns, "-6", "route", "add", "default", "via", nw.gw6.String()},
	} {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// Detach unplugs machine i (its namespace may be gone already).
func (nw *Network) Detach(i int) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return absentOK(ip("-n", nw.n.router, "link", "del", machineLink(nw.cfg.ID, i)))
}

// rawRoute is a route as `ip -j route show` gives it.
type rawRoute struct {
	Dst     string `json:"dst"`
	Gateway string `json:"gateway"`
}

// Route is a kernel route in the VPC router: Dst via a machine.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// SetRoute makes the router send dst via a machine's address, as a VPC
// route table entry does (replacing an earlier route for dst).
func (nw *Network) SetRoute(dst netip.Prefix, via netip.Addr) error {
	subnet := nw.cfg.Subnet.Prefix
	if dst.Addr().Is6() {
		subnet = nw.cfg.Subnet6.Prefix
	}
	if !subnet.IsValid() || !subnet.Contains(via) || dst.Addr().Is6() != via.Is6() {
		return fmt.Errorf("route %s via %s: the next hop is not in the VPC subnet of its family %v", dst, via, subnet)
	}
	return ip("-n", nw.n.router, "route", "replace", dst.Masked().String(), "via", via.String(), "proto", "static")
}

// DeleteRoute removes the router's route for dst (absent is fine).
func (nw *Network) DeleteRoute(dst netip.Prefix) error {
	return absentOK(ip("-n", nw.n.router, "route", "del", dst.Masked().String(), "proto", "static"))
}

// Routes lists the router's routes via machines.
func (nw *Network) Routes() ([]Route, error) {
	var raw []rawRoute
	if err := ipJSON(&raw, "-n", nw.n.router, "route", "show", "proto", "static"); err != nil {
		return nil, err
	}
	if nw.gw6.IsValid() {
		var raw6 []rawRoute
		if err := ipJSON(&raw6, "-n", nw.n.router, "-6", "route", "show", "proto", "static"); err != nil {
			return nil, err
		}
		raw = append(raw, raw6...)
	}
	var out []Route
	for _, r := range raw {
		p, err1 := parseDst(r.Dst, strings.Contains(r.Dst, ":"))
		g, err2 := netip.ParseAddr(r.Gateway)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Route{Dst: p, Via: g})
	}
	slices.SortFunc(out, func(a, b Route) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
	return out, nil
}
