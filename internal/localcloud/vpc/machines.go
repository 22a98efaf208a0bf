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

// Detach unplugs machine i (its namespace may be gone already).
func (nw *Network) Detach(i int) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return absentOK(ip("-n", nw.n.router, "link", "del", machineLink(nw.cfg.ID, i)))
}

// Route is a kernel route in the VPC router: Dst via a machine.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// SetRoute makes the router send dst via a machine's address, as a VPC
// route table entry does (replacing an earlier route for dst).
func (nw *Network) SetRoute(dst netip.Prefix, via netip.Addr) error {
	if !nw.cfg.Subnet.Prefix.Contains(via) {
		return fmt.Errorf("route %s via %s: the next hop is not in the VPC subnet %s", dst, via, nw.cfg.Subnet.Prefix)
	}
	return ip("-n", nw.n.router, "route", "replace", dst.Masked().String(), "via", via.String(), "proto", "static")
}

// DeleteRoute removes the router's route for dst (absent is fine).
func (nw *Network) DeleteRoute(dst netip.Prefix) error {
	return absentOK(ip("-n", nw.n.router, "route", "del", dst.Masked().String(), "proto", "static"))
}

// Routes lists the router's routes via machines.
func (nw *Network) Routes() ([]Route, error) {
	var raw []struct {
		Dst     string `json:"dst"`
		Gateway string `json:"gateway"`
	}
	if err := ipJSON(&raw, "-n", nw.n.router, "route", "show", "proto", "static"); err != nil {
		return nil, err
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
