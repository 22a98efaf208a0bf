package vpc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Forwarded VIPs: the kernel path of a proxied load balancer. The data
// plane's listeners in the router namespace serve a VIP in user space (an
// accept and a dial per connection, two sockets per byte); for the
// clients a rule here covers, the router's own netfilter does the same hop
// instead: it rewrites the destination to a healthy backend's address and
// port (DNAT, one backend per new flow, round robin or by the client's
// address). A client outside the VPC (the host) keeps its address: the
// backend's reply goes back by the machine's default route, through the
// router, which rewrites it back. A client inside the VPC (a machine, a
// pod) gets the router's uplink address as its source (SNAT): the flow
// may be rewritten to the very machine it came from, which would answer
// its own pod directly, past the router; the uplink address is outside
// the machines' network, as the host's is (never a gateway address in
// their subnet, which Kubernetes' e2e suite takes for a node's: "source
// IP was NOT preserved"). Nothing else changes for what the rules do not
// cover: a client outside the
// source ranges, a VIP whose family has no backend of its own, a VIP with
// no healthy backend reach the router's own stack, where the data plane's
// listeners keep serving, refusing or falling back as before. Everything
// is in one nftables table of the router's namespace, made by the cloud
// and gone with the namespace.
const (
	// natTable is the table (family inet) in the router's namespace.
	natTable = "portside_lb"
	// natMark marks the flows the table rewrote (ct mark): only those are
	// source-rewritten, and EndFlows deletes only those.
	natMark = 0x00f50000
)

// ErrNotForwardable is what SetForwardedVIP returns for a VIP the router
// cannot take at all (a backend that is no machine of the VPC, a VIP not
// the router's): the caller leaves it to the proxy, and retrying would not
// help.
var ErrNotForwardable = errors.New("not forwardable by the VPC router")

// ForwardedVIP is what the router rewrites for one VIP of a proxied load
// balancer.
type ForwardedVIP struct {
	VIP netip.Addr
	// Ports are the listener ports with their backends; a port without
	// backends is not forwarded.
	Ports []ForwardedPort
	// Sources are the allowed client ranges; empty: every client.
	Sources []netip.Prefix
	// Affinity picks the backend by the client's address (a hash) instead
	// of round robin.
	Affinity bool
}

// ForwardedPort is one listener port of a forwarded VIP.
type ForwardedPort struct {
	Protocol string // "TCP" or "UDP" (any case)
	Port     int
	// Backends are the addresses and ports new flows go to, in the order
	// the hash and the round robin index them (sorted by the caller).
	Backends []netip.AddrPort
}

// natChain names a VIP's chain: its address in hex, unique per VIP and a
// valid nft identifier.
func natChain(vip netip.Addr) string {
	return fmt.Sprintf("vip-%x", vip.AsSlice())
}

// natSetup is the table's skeleton: a verdict map per family from VIP to
// its chain, looked up for every packet before routing, and after routing
// the source rewrite of the marked flows from inside the VPC (inside: the
// machines' subnets and the ranges routed to them, both families) to the
// router's uplink address of their family (src6 invalid: an IPv4 VPC).
func natSetup(src4, src6 netip.Addr, inside []netip.Prefix) string {
	var rules []string
	for _, fam := range []struct {
		name string
		src  netip.Addr
		v4   bool
	}{{"ip", src4, true}, {"ip6", src6, false}} {
		var in []string
		for _, p := range inside {
			if p.Addr().Is4() == fam.v4 {
				in = append(in, p.Masked().String())
			}
		}
		if !fam.src.IsValid() || len(in) == 0 {
			continue
		}
		slices.Sort(in)
		rules = append(rules, fmt.Sprintf("ct mark %#08x %s saddr { %s } snat %s to %s", natMark, fam.name, strings.Join(slices.Compact(in), ", "), fam.name, fam.src))
	}
	return fmt.Sprintf(`table inet %s {
	map vips4 { type ipv4_addr : verdict; }
	map vips6 { type ipv6_addr : verdict; }
	chain prerouting { type nat hook prerouting priority dstnat; policy accept;
		ip daddr vmap @vips4
		ip6 daddr vmap @vips6
	}
	chain postrouting { type nat hook postrouting priority srcnat; policy accept;
		%s
	}
}
`, natTable, strings.Join(rules, "\n\t\t"))
}

// inside are the VPC's own ranges: the machines' subnets and what is
// routed to them (pod CIDRs), not the router's own (VIPs).
func (nw *Network) inside() []netip.Prefix {
	out := []netip.Prefix{nw.cfg.Subnet.Prefix}
	if nw.cfg.Subnet6.Prefix.IsValid() {
		out = append(out, nw.cfg.Subnet6.Prefix)
	}
	for _, r := range nw.cfg.Routed {
		if !slices.ContainsFunc(nw.cfg.Local, func(l Range) bool { return l.Prefix.Overlaps(r.Prefix) }) {
			out = append(out, r.Prefix)
		}
	}
	return out
}

// natRules are a VIP's chain's rules (after "add rule inet TABLE CHAIN"):
// one per port with backends of the VIP's family. None when source ranges
// were given and none is of the VIP's family (no client of it may reach
// the backends: the listeners refuse them).
func natRules(f ForwardedVIP) ([]string, error) {
	fam, v4 := "ip6", f.VIP.Is4()
	if v4 {
		fam = "ip"
	}
	var src string
	if len(f.Sources) > 0 {
		var in []string
		for _, s := range f.Sources {
			if s.Addr().Is4() == v4 {
				in = append(in, s.Masked().String())
			}
		}
		if len(in) == 0 {
			return nil, nil
		}
		slices.Sort(in)
		in = slices.Compact(in)
		src = fmt.Sprintf("%s saddr { %s } ", fam, strings.Join(in, ", "))
	}
	pick := "numgen inc"
	if f.Affinity {
		pick = "jhash " + fam + " saddr"
	}
	var out []string
	for _, p := range f.Ports {
		proto := strings.ToLower(p.Protocol)
		if proto != "tcp" && proto != "udp" {
			return nil, fmt.Errorf("forwarded VIP %s: protocol %q: only TCP and UDP are forwarded", f.VIP, p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Errorf("forwarded VIP %s: port %d out of range", f.VIP, p.Port)
		}
		var elems []string
		for i, be := range p.Backends {
			if be.Addr().Is4() != v4 {
				return nil, fmt.Errorf("forwarded VIP %s: backend %s is of the other family", f.VIP, be)
			}
			if be.Port() == 0 {
				return nil, fmt.Errorf("forwarded VIP %s: backend %s has no port", f.VIP, be)
			}
			elems = append(elems, fmt.Sprintf("%d : %s . %d", i, be.Addr(), be.Port()))
		}
		if len(elems) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s%s dport %d ct mark set %#08x dnat %s to %s mod %d map { %s }",
			src, proto, p.Port, natMark, fam, pick, len(elems), strings.Join(elems, ", ")))
	}
	return out, nil
}

// natScript is one nft transaction bringing a VIP's chain to f: the chain
// flushed and refilled, and the VIP's map entry added or removed (none
// when no rule is left, so the VIP's packets go straight to the router's
// stack). had: the VIP's entry exists now.
func natScript(f ForwardedVIP, had bool) (script string, has bool, err error) {
	rules, err := natRules(f)
	if err != nil {
		return "", had, err
	}
	chain, vmap := natChain(f.VIP), "vips6"
	if f.VIP.Is4() {
		vmap = "vips4"
	}
	var b strings.Builder
	if len(rules) == 0 {
		if !had {
			return "", false, nil
		}
		fmt.Fprintf(&b, "delete element inet %s %s { %s }\n", natTable, vmap, f.VIP)
		fmt.Fprintf(&b, "delete chain inet %s %s\n", natTable, chain)
		return b.String(), false, nil
	}
	fmt.Fprintf(&b, "add chain inet %s %s\n", natTable, chain)
	fmt.Fprintf(&b, "flush chain inet %s %s\n", natTable, chain)
	for _, r := range rules {
		fmt.Fprintf(&b, "add rule inet %s %s %s\n", natTable, chain, r)
	}
	if !had {
		fmt.Fprintf(&b, "add element inet %s %s { %s : jump %s }\n", natTable, vmap, f.VIP, chain)
	}
	return b.String(), true, nil
}

// SetForwardedVIP makes the router rewrite f's flows to its backends
// (replacing what it did for f.VIP before). Flows already rewritten keep
// their backend (conntrack) until they end or EndFlows ends them.
func (nw *Network) SetForwardedVIP(f ForwardedVIP) error {
	if !slices.ContainsFunc(nw.cfg.Local, func(l Range) bool { return l.Prefix.Contains(f.VIP) }) {
		return fmt.Errorf("forwarded VIP %s: %w: not in a range the router owns (%v)", f.VIP, ErrNotForwardable, nw.cfg.Local)
	}
	subnet := nw.cfg.Subnet.Prefix
	if !f.VIP.Is4() {
		subnet = nw.cfg.Subnet6.Prefix
	}
	for _, p := range f.Ports {
		for _, be := range p.Backends {
			if !subnet.IsValid() || !subnet.Contains(be.Addr()) {
				return fmt.Errorf("forwarded VIP %s to %s: %w: the backend is not a machine of the VPC subnet of its family (%s)", f.VIP, be, ErrNotForwardable, subnet)
			}
		}
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	had := nw.forwarded[f.VIP]
	script, has, err := natScript(f, had)
	if err != nil || script == "" {
		return err
	}
	if err := nw.natSetupOnce(); err != nil {
		return err
	}
	if err := nw.nft(script); err != nil {
		return err
	}
	if has {
		nw.forwarded[f.VIP] = true
	} else {
		delete(nw.forwarded, f.VIP)
	}
	return nil
}

// DeleteForwardedVIP stops rewriting vip's new flows: its packets reach
// the router's own stack again.
func (nw *Network) DeleteForwardedVIP(vip netip.Addr) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if !nw.forwarded[vip] {
		return nil
	}
	script, _, err := natScript(ForwardedVIP{VIP: vip}, true)
	if err != nil {
		return err
	}
	if err := nw.nft(script); err != nil {
		return err
	}
	delete(nw.forwarded, vip)
	return nil
}

// natSetupOnce makes the table the first time a VIP is forwarded (nw.mu
// held): a cloud whose load balancers never need it runs no nft. The
// namespace is the cloud's own and new with the VPC, so the table is too.
func (nw *Network) natSetupOnce() error {
	if nw.forwarded != nil {
		return nil
	}
	if err := nw.noBridgeNetfilter(); err != nil {
		return err
	}
	if err := nw.nft(natSetup(nw.router, nw.router6, nw.inside())); err != nil {
		return fmt.Errorf("the VPC router's kernel path for load balancers: %w", err)
	}
	nw.forwarded = map[netip.Addr]bool{}
	return nil
}

// nft runs an nft script in the router's namespace.
func (nw *Network) nft(script string) error {
	bin, err := nftPath()
	if err != nil {
		return err
	}
	return InNetns(NetnsPath(nw.n.router), func() error {
		// Started from this thread, so in the router's namespace.
		cmd := exec.Command(bin, "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft in the VPC router: %w: %s (script: %q)", err, bytes.TrimSpace(out), script)
		}
		return nil
	})
}

// nftPath finds nft, which is in /usr/sbin (not on every user's PATH).
func nftPath() (string, error) {
	if p, err := exec.LookPath("nft"); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("/usr/sbin/nft"); err == nil {
		return p, nil
	}
	return "", errors.New("nft not found: the kernel path of load balancers needs nftables (make node-packages installs it); the data plane serves the VIPs in user space meanwhile")
}

// FlowFilter selects the router's rewritten flows to end; zero fields
// match anything.
type FlowFilter struct {
	VIP netip.Addr
	// Port is the VIP's (listener) port; Protocol "TCP" or "UDP".
	Protocol string
	Port     uint16
	// Backend and BackendPort are where the flow was rewritten to.
	Backend     netip.Addr
	BackendPort uint16
}

// matchFlow reports whether a conntrack entry is one of ours that f
// selects: marked by the table, to f.VIP (the original destination),
// rewritten to f's backend (the reply's source).
func matchFlow(f FlowFilter, mark uint32, proto uint8, origDst net.IP, origDstPort uint16, replySrc net.IP, replySrcPort uint16) bool {
	if mark != natMark {
		return false
	}
	if a, ok := netip.AddrFromSlice(origDst); !ok || a.Unmap() != f.VIP {
		return false
	}
	switch strings.ToLower(f.Protocol) {
	case "tcp":
		if proto != 6 {
			return false
		}
	case "udp":
		if proto != 17 {
			return false
		}
	}
	if f.Port != 0 && origDstPort != f.Port {
		return false
	}
	if f.Backend.IsValid() {
		if a, ok := netip.AddrFromSlice(replySrc); !ok || a.Unmap() != f.Backend {
			return false
		}
	}
	return f.BackendPort == 0 || replySrcPort == f.BackendPort
}

type flowMatcher FlowFilter

func (m flowMatcher) MatchConntrackFlow(fl *netlink.ConntrackFlow) bool {
	return matchFlow(FlowFilter(m), fl.Mark, fl.Forward.Protocol, fl.Forward.DstIP, fl.Forward.DstPort, fl.Reverse.SrcIP, fl.Reverse.SrcPort)
}

// EndFlows deletes the router's rewritten flows f selects (a drained
// backend's, after the drain timeout): the next packet of such a flow is
// a new flow, rewritten to a current backend, which resets it, as the
// proxy closes a drained connection. It reports how many it ended.
func (nw *Network) EndFlows(f FlowFilter) (int, error) {
	if !f.VIP.IsValid() {
		return 0, errors.New("EndFlows: a VIP is required")
	}
	fam := netlink.InetFamily(netlink.FAMILY_V6)
	if f.VIP.Is4() {
		fam = netlink.FAMILY_V4
	}
	var n uint
	err := InNetns(NetnsPath(nw.n.router), func() error {
		h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		defer h.Close()
		n, err = h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, flowMatcher(f))
		return err
	})
	if err != nil {
		return int(n), fmt.Errorf("ending the VPC router's flows to %s: %w", f.VIP, err)
	}
	return int(n), nil
}
