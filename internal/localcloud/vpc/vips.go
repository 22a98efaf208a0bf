package vpc

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Routed VIPs: the VIP range is the router's own (a local route), so the
// data plane can serve any VIP there. A routed VIP's listener ports are
// forwarded to machines instead, by policy rules that come before the
// local table: `to VIP, from an allowed source, ipproto P, dport N →
// table vipTable`, where the VIP's route lists the healthy machines as
// next hops. A packet that matches no rule, or whose VIP has no route
// (no healthy machine), falls through to the local table and reaches the
// router's own stack, where nothing listens: TCP is reset and UDP gets
// port unreachable, i.e. the client sees a refused connection.
const (
	// vipTable holds the routed VIPs' routes (245, as RouteProto).
	vipTable = "245"
	// vipRulePref is the routed VIPs' rules' priority; localRulePref is
	// where the local table's rule moves from 0 to come after them.
	vipRulePref   = "500"
	localRulePref = "1000"
)

// RoutedVIP is one VIP the router forwards to machines.
type RoutedVIP struct {
	VIP netip.Addr
	// Ports are "tcp"/"udp" (any case) and a port.
	Ports []VIPPort
	// Sources are the allowed client ranges; empty: every client.
	Sources []netip.Prefix
	// Via are the machines' addresses, in the VPC subnet; empty: nothing
	// is forwarded.
	Via []netip.Addr
}

// VIPPort is a forwarded port of a routed VIP.
type VIPPort struct {
	Protocol string
	Port     int
}

// vipRules are the `ip rule` selectors (after "rule add|del") of a routed
// VIP: one per allowed source × port.
func vipRules(r RoutedVIP) [][]string {
	bits := r.VIP.BitLen()
	sources := []string{"all"}
	if len(r.Sources) > 0 {
		sources = nil
		for _, s := range r.Sources {
			if s.Addr().Is4() == r.VIP.Is4() {
				sources = append(sources, s.Masked().String())
			}
		}
		if len(sources) == 0 {
			return nil // no client of this family is allowed
		}
	}
	var out [][]string
	for _, src := range sources {
		for _, p := range r.Ports {
			out = append(out, []string{"pref", vipRulePref, "from", src, "to", netip.PrefixFrom(r.VIP, bits).String(),
				"ipproto", strings.ToLower(p.Protocol), "dport", strconv.Itoa(p.Port), "table", vipTable})
		}
	}
	return out
}

// vipRoute is the `ip route replace` spec of a routed VIP with next hops,
// nil with none.
func vipRoute(r RoutedVIP, dev string) []string {
	if len(r.Via) == 0 {
		return nil
	}
	spec := []string{netip.PrefixFrom(r.VIP, r.VIP.BitLen()).String(), "table", vipTable, "proto", "static"}
	if len(r.Via) == 1 {
		return append(spec, "via", r.Via[0].String(), "dev", dev)
	}
	for _, v := range r.Via {
		spec = append(spec, "nexthop", "via", v.String(), "dev", dev)
	}
	return spec
}

func famFlag(a netip.Addr) string {
	if a.Is4() {
		return "-4"
	}
	return "-6"
}

// SetRoutedVIP makes the router forward r (replacing what it did for
// r.VIP before).
func (nw *Network) SetRoutedVIP(r RoutedVIP) error {
	// Via its own family's subnet: an IPv6 VIP is forwarded to the
	// machines' IPv6 addresses (a dual-stack VPC's).
	subnet := nw.cfg.Subnet.Prefix
	if !r.VIP.Is4() {
		subnet = nw.cfg.Subnet6.Prefix
	}
	for _, v := range r.Via {
		if !subnet.IsValid() || !subnet.Contains(v) {
			return fmt.Errorf("routed VIP %s via %s: the backend is not a machine of the VPC subnet of its family (%s)", r.VIP, v, subnet)
		}
	}
	if !slices.ContainsFunc(nw.cfg.Local, func(l Range) bool { return l.Prefix.Contains(r.VIP) }) {
		return fmt.Errorf("routed VIP %s: not in a range the router owns (%v)", r.VIP, nw.cfg.Local)
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	rt, fam := nw.n.router, famFlag(r.VIP)
	// The route first: a new rule never points at a missing route for
	// longer than it must (it would fall through and refuse).
	if spec := vipRoute(r, nw.n.bridge); spec != nil {
		if err := ip(append([]string{"-n", rt, fam, "route", "replace"}, spec...)...); err != nil {
			return err
		}
	} else if err := absentOK(ip("-n", rt, fam, "route", "del", netip.PrefixFrom(r.VIP, r.VIP.BitLen()).String(), "table", vipTable)); err != nil {
		return err
	}
	want := vipRules(r)
	have := nw.vipRules[r.VIP]
	for _, rule := range want {
		if !slices.ContainsFunc(have, func(h []string) bool { return slices.Equal(h, rule) }) {
			if err := ip(append([]string{"-n", rt, fam, "rule", "add"}, rule...)...); err != nil {
				return err
			}
		}
	}
	for _, rule := range have {
		if !slices.ContainsFunc(want, func(w []string) bool { return slices.Equal(w, rule) }) {
			if err := absentOK(ip(append([]string{"-n", rt, fam, "rule", "del"}, rule...)...)); err != nil {
				return err
			}
		}
	}
	if nw.vipRules == nil {
		nw.vipRules = map[netip.Addr][][]string{}
	}
	nw.vipRules[r.VIP] = want
	return nil
}

// DeleteRoutedVIP stops forwarding vip: its rules and route go, and the
// router's own stack (the data plane's listeners, or a refusal) has it.
func (nw *Network) DeleteRoutedVIP(vip netip.Addr) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	rt, fam := nw.n.router, famFlag(vip)
	for _, rule := range nw.vipRules[vip] {
		if err := absentOK(ip(append([]string{"-n", rt, fam, "rule", "del"}, rule...)...)); err != nil {
			return err
		}
	}
	delete(nw.vipRules, vip)
	return absentOK(ip("-n", rt, fam, "route", "del", netip.PrefixFrom(vip, vip.BitLen()).String(), "table", vipTable))
}

// routeVIPsSetup prepares the router for routed VIPs: the local table's
// rule moves after the VIPs' rules; the replies of the machines, whose
// source is a VIP (one of the router's own addresses), are accepted
// (accept_local) and not dropped by reverse-path filtering; multipath
// hashes flows by ports too, so one client's connections spread over the
// machines. All of it per namespace, in the router's own.
func (nw *Network) routeVIPsSetup() error {
	rt := nw.n.router
	for _, fam := range []string{"-4", "-6"} {
		if err := ip("-n", rt, fam, "rule", "add", "pref", localRulePref, "table", "local"); err != nil {
			return err
		}
		if err := ip("-n", rt, fam, "rule", "del", "pref", "0", "table", "local"); err != nil {
			return err
		}
	}
	path := NetnsPath(rt)
	for _, kv := range [][2]string{
		{"net.ipv4.conf.all.accept_local", "1"},
		{"net.ipv4.conf." + nw.n.bridge + ".accept_local", "1"},
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf." + nw.n.bridge + ".rp_filter", "0"},
		{"net.ipv4.fib_multipath_hash_policy", "1"},
		// A flow the router rewrites to the machine it came from leaves by
		// the bridge it came in on: no ICMP redirect for it (the machine
		// would take the router's word and send the VIP's packets to
		// itself).
		{"net.ipv4.conf.all.send_redirects", "0"},
		{"net.ipv4.conf." + nw.n.bridge + ".send_redirects", "0"},
		{"net.ipv6.fib_multipath_hash_policy", "1"},
	} {
		if err := writeSysctlIn(path, kv[0], kv[1]); err != nil {
			return fmt.Errorf("VPC router: %s=%s: %w", kv[0], kv[1], err)
		}
	}
	return nw.noBridgeNetfilter()
}

// noBridgeNetfilter keeps the router's bridge a plain switch: where the
// kernel has br_netfilter, frames between its ports go through the IP
// hooks as well (net.bridge.bridge-nf-call-*, 1 by default, per
// namespace), so a flow the kernel path rewrites to the machine it came
// from is "bridged" back to that machine's own port and dropped. Without
// it the router routes such a flow (forward.go). Written in the router's
// namespace only (the host's stay as they are); absent without
// br_netfilter, where there is nothing to switch off. Also run when the
// kernel path starts, in case the module was loaded since.
func (nw *Network) noBridgeNetfilter() error {
	path := NetnsPath(nw.n.router)
	for _, key := range []string{"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"} {
		if err := writeSysctlIn(path, key, "0"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("VPC router: %s=0: %w", key, err)
		}
	}
	return nil
}
