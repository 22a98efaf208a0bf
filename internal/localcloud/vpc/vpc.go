package vpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"sync"

	"k8s.io/klog/v2"
)

// Metrics of the kernel routes: the unreachable cover loses to the routes
// into the VPC while they exist, and stays when they are gone.
const (
	coverMetric = "4000"
	routeMetric = "10"
)

// RouteProto is the routing protocol number the VPC's host routes carry
// (`proto 245` in `ip route`; unassigned in the kernel's and iproute2's
// lists). A route carries no owner the way a link's ifindex or a
// namespace's inode proves one, so Down deletes only a route with the
// recorded destination, next hop, metric and this protocol: an identical
// route someone else adds later (by hand or by a routing daemon, which
// set their own protocol) is not matched.
const RouteProto = "245"

// Config is one VPC.
type Config struct {
	// ID names its kernel objects (see IDFor).
	ID string
	// Subnet is the machines' network; its first address is the gateway,
	// on the router's bridge.
	Subnet Range
	// Uplink is the host↔router link's /30 (or /29, /31).
	Uplink Range
	// Subnet6 and Uplink6 make the VPC dual-stack (zero: IPv4 only): the
	// machines' IPv6 network, whose first address is the IPv6 gateway on
	// the bridge, and the uplink's IPv6 prefix (a /64 to /126). Routed,
	// Local and Covered may then hold IPv6 ranges: the host sends those via
	// the router's IPv6 uplink address.
	Subnet6, Uplink6 Range
	// Routed are more ranges the host sends into the VPC (pod CIDRs, VIPs).
	Routed []Range
	// Local are ranges of Routed that are the router's own addresses, all
	// of each at once (the load balancers' VIPs: the cloud serves them in
	// the router namespace, for the host and the machines alike).
	Local []Range
	// Covered are the ranges the host covers with unreachable routes; each
	// of Subnet, Uplink and Routed must lie inside one.
	Covered []Range
	// StateFile records what was made, for Down (also after a kill -9).
	StateFile string
}

// Network is a VPC that is up.
type Network struct {
	cfg    Config
	n      names
	rec    *record
	mu     sync.Mutex
	gw     netip.Addr
	router netip.Addr // the router's uplink address: the host's next hop
	host   netip.Addr // the host's uplink address
	// The same for IPv6 (invalid when the VPC is IPv4 only).
	gw6, router6, host6 netip.Addr
	// vipRules are the routed VIPs' rules in the router (vips.go).
	vipRules map[netip.Addr][][]string
	// forwarded are the VIPs with a chain in the router's kernel path
	// (forward.go); nil until its table is made.
	forwarded map[netip.Addr]bool
}

// Up makes the VPC. What an earlier run left (after a kill -9) is removed
// first, by its record. On error everything made so far is removed.
func Up(ctx context.Context, cfg Config) (*Network, error) {
	n, err := namesFor(cfg.ID)
	if err != nil {
		return nil, err
	}
	if err := Down(ctx, cfg.StateFile); err != nil {
		return nil, fmt.Errorf("removing what an earlier run left: %w", err)
	}
	hostAddr, routerAddr, err := uplinkAddrs(cfg.Uplink.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Uplink.Flag, err)
	}
	inner := []netip.Prefix{cfg.Subnet.Prefix, cfg.Uplink.Prefix}
	var gw6, host6, router6 netip.Addr
	if cfg.Subnet6.Prefix.IsValid() || cfg.Uplink6.Prefix.IsValid() {
		if host6, router6, err = uplinkAddrs6(cfg.Subnet6, cfg.Uplink6); err != nil {
			return nil, err
		}
		gw6 = gateway(cfg.Subnet6.Prefix)
		inner = append(inner, cfg.Subnet6.Prefix, cfg.Uplink6.Prefix)
	}
	for _, r := range cfg.Routed {
		if r.Prefix.Addr().Is6() && !gw6.IsValid() {
			return nil, fmt.Errorf("%s %s: an IPv6 range needs an IPv6 VPC (give it an IPv6 subnet and uplink)", r.Flag, r.Prefix)
		}
		inner = append(inner, r.Prefix)
	}
	if p, ok := coveredBy(inner, cfg.Covered); !ok {
		return nil, fmt.Errorf("%s is not inside any covered range: every range the VPC routes must be covered by an unreachable route", p)
	}
	host, err := hostNets()
	if err != nil {
		return nil, err
	}
	if err := checkRanges(cfg.Covered, host, nil); err != nil {
		return nil, err
	}
	rec, err := loadRecord(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	nw := &Network{cfg: cfg, n: n, rec: rec, gw: gateway(cfg.Subnet.Prefix), router: routerAddr, host: hostAddr,
		gw6: gw6, router6: router6, host6: host6}
	if err := nw.build(); err != nil {
		if derr := Down(context.Background(), cfg.StateFile); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", derr))
		}
		return nil, err
	}
	klog.FromContext(ctx).Info("VPC up", "id", cfg.ID, "subnet", cfg.Subnet.Prefix, "gateway", nw.gw, "router", n.router)
	return nw, nil
}

func (nw *Network) build() error {
	n, cfg := nw.n, nw.cfg
	// Cover first: from here on nothing for these ranges can leave by the
	// default route, whatever fails later.
	for _, c := range cfg.Covered {
		if err := nw.addRoute("", "unreachable", c.Prefix.String(), "metric", coverMetric, "proto", RouteProto); err != nil {
			return err
		}
	}
	if err := nw.rec.add(object{Kind: "netns", Name: n.router}); err != nil {
		return err
	}
	if err := ip("netns", "add", n.router); err != nil {
		return err
	}
	ino, err := netnsInode(n.router)
	if err != nil {
		return err
	}
	if err := nw.rec.setIdent("netns", n.router, ino); err != nil {
		return err
	}
	if nw.gw6.IsValid() {
		if err := noDAD(n.router); err != nil {
			return err
		}
	}
	if err := nw.rec.add(object{Kind: "link", Name: n.hostUplink}); err != nil {
		return err
	}
	steps := [][]string{
		{"link", "add", n.hostUplink, "type", "veth", "peer", "name", n.routerUplink, "netns", n.router},
		{"addr", "add", prefixOf(nw.host, cfg.Uplink.Prefix), "dev", n.hostUplink},
		{"link", "set", n.hostUplink, "up"},
		{"-n", n.router, "link", "set", "lo", "up"},
		{"-n", n.router, "addr", "add", prefixOf(nw.router, cfg.Uplink.Prefix), "dev", n.routerUplink},
		{"-n", n.router, "link", "set", n.routerUplink, "up"},
		// No multicast snooping: IPv6 finds neighbours by multicast, and a
		// snooping bridge drops the solicitations for a port that has not
		// reported its groups yet (seconds after it joins).
		{"-n", n.router, "link", "add", n.bridge, "type", "bridge", "mcast_snooping", "0"},
		{"-n", n.router, "addr", "add", prefixOf(nw.gw, cfg.Subnet.Prefix), "dev", n.bridge},
		{"-n", n.router, "link", "set", n.bridge, "up"},
	}
	for i, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
		if i == 0 {
			idx, err := linkIndex(n.hostUplink)
			if err != nil {
				return err
			}
			if err := nw.rec.setIdent("link", n.hostUplink, idx); err != nil {
				return err
			}
		}
	}
	// The router forwards between the uplink and the bridge: only here,
	// in the cloud's own namespace.
	if err := writeSysctlIn(NetnsPath(n.router), "net.ipv4.ip_forward", "1"); err != nil {
		return fmt.Errorf("switching on forwarding in the VPC router: %w", err)
	}
	if nw.gw6.IsValid() {
		if err := nw.build6(); err != nil {
			return err
		}
	}
	for _, l := range cfg.Local {
		// A local route makes the whole range the router's, with no address
		// per VIP; the namespace going removes it.
		if err := ip("-n", n.router, "route", "add", "local", l.Prefix.String(), "dev", "lo"); err != nil {
			return err
		}
	}
	if err := nw.routeVIPsSetup(); err != nil {
		return err
	}
	into := append([]Range{cfg.Subnet}, cfg.Routed...)
	if nw.gw6.IsValid() {
		into = append(into, cfg.Subnet6)
	}
	for _, r := range into {
		via := nw.router
		if r.Prefix.Addr().Is6() {
			via = nw.router6
		}
		if err := nw.addRoute("", r.Prefix.String(), "via", via.String(), "dev", n.hostUplink, "metric", routeMetric, "proto", RouteProto); err != nil {
			return err
		}
	}
	return nil
}

// build6 gives the uplink and the bridge their IPv6 addresses (nodad: a
// VPC's addresses are its own, and duplicate detection would only delay
// them) and switches on IPv6 forwarding in the router, its own namespace.
func (nw *Network) build6() error {
	n, cfg := nw.n, nw.cfg
	for _, s := range [][]string{
		{"addr", "add", prefixOf(nw.host6, cfg.Uplink6.Prefix), "dev", n.hostUplink, "nodad"},
		{"-n", n.router, "addr", "add", prefixOf(nw.router6, cfg.Uplink6.Prefix), "dev", n.routerUplink, "nodad"},
		{"-n", n.router, "addr", "add", prefixOf(nw.gw6, cfg.Subnet6.Prefix), "dev", n.bridge, "nodad"},
	} {
		if err := ip(s...); err != nil {
			return err
		}
	}
	if err := writeSysctlIn(NetnsPath(n.router), "net.ipv6.conf.all.forwarding", "1"); err != nil {
		return fmt.Errorf("switching on IPv6 forwarding in the VPC router: %w", err)
	}
	// The cloud's listeners bind the VIPs of a Local range (a local route,
	// no address per VIP): IPv4 allows that, IPv6 only with non-local
	// binds, which this switches on in the router's namespace alone.
	if err := writeSysctlIn(NetnsPath(n.router), "net.ipv6.ip_nonlocal_bind", "1"); err != nil {
		return fmt.Errorf("allowing IPv6 VIP listeners in the VPC router: %w", err)
	}
	return nil
}

// noDAD switches off IPv6 duplicate address detection for the links a
// namespace of the VPC is about to get (its default, before they are made):
// every address in a VPC is the cloud's to give, and detection would keep
// a new link's link-local address tentative for up to two seconds, during
// which its machine cannot be reached. Per namespace, never the host's.
func noDAD(netns string) error {
	for _, key := range []string{"net.ipv6.conf.default.accept_dad", "net.ipv6.conf.all.accept_dad"} {
		if err := writeSysctlIn(NetnsPath(netns), key, "0"); err != nil {
			return fmt.Errorf("%s in %s: %w", key, netns, err)
		}
	}
	return nil
}

// addRoute records, then adds, a route in the host (netns "") or a netns.
func (nw *Network) addRoute(netns string, spec ...string) error {
	if err := nw.rec.add(object{Kind: "route", Name: spec[0], Netns: netns, Route: spec}); err != nil {
		return err
	}
	args := append([]string{"route", "add"}, spec...)
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	return ip(args...)
}

// Gateway is the machines' gateway: the router's address on the bridge,
// where the cloud serves the control plane to its machines (see Expose).
func (nw *Network) Gateway() netip.Addr { return nw.gw }

// HostAddr is the host's own address on the uplink: what machines see as
// the source of the host's connections.
func (nw *Network) HostAddr() netip.Addr { return nw.host }

// HostAddr6 is the host's IPv6 uplink address (invalid in an IPv4 VPC).
func (nw *Network) HostAddr6() netip.Addr { return nw.host6 }

// RouterAddr and RouterAddr6 are the router's uplink addresses: the
// source backends see for the kernel path's flows (forward.go). RouterAddr6
// is invalid in an IPv4 VPC.
func (nw *Network) RouterAddr() netip.Addr  { return nw.router }
func (nw *Network) RouterAddr6() netip.Addr { return nw.router6 }

// RouterNetns is the router namespace's path.
func (nw *Network) RouterNetns() string { return NetnsPath(nw.n.router) }

// Subnet is the machines' network.
func (nw *Network) Subnet() netip.Prefix { return nw.cfg.Subnet.Prefix }

// Gateway6 and Subnet6 are the IPv6 ones (invalid: the VPC is IPv4 only).
func (nw *Network) Gateway6() netip.Addr { return nw.gw6 }

// Subnet6 is the machines' IPv6 network.
func (nw *Network) Subnet6() netip.Prefix { return nw.cfg.Subnet6.Prefix }

func prefixOf(a netip.Addr, p netip.Prefix) string {
	return netip.PrefixFrom(a, p.Bits()).String()
}

// ip runs ip(8).
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return ipError(args, out, err)
	}
	return nil
}

func ipJSON(v any, args ...string) error {
	args = append([]string{"-j"}, args...)
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ipError(args, ee.Stderr, err)
		}
		return ipError(args, nil, err)
	}
	if len(out) == 0 {
		return nil
	}
	return json.Unmarshal(out, v)
}

func linkIndex(name string) (uint64, error) {
	var links []struct {
		Index uint64 `json:"ifindex"`
	}
	if err := ipJSON(&links, "link", "show", "dev", name); err != nil {
		return 0, err
	}
	if len(links) != 1 {
		return 0, fmt.Errorf("link %s: not found", name)
	}
	return links[0].Index, nil
}

// hostNets lists the host namespace's address prefixes and routes.
func hostNets() ([]HostNet, error) {
	var addrs []struct {
		Name  string `json:"ifname"`
		Infos []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := ipJSON(&addrs, "addr", "show"); err != nil {
		return nil, err
	}
	var out []HostNet
	for _, l := range addrs {
		for _, a := range l.Infos {
			addr, err := netip.ParseAddr(a.Local)
			if err != nil || addr.IsLoopback() || addr.IsLinkLocalUnicast() {
				continue
			}
			out = append(out, HostNet{Prefix: netip.PrefixFrom(addr, a.PrefixLen).Masked(), Dev: l.Name, Kind: "address"})
		}
	}
	for _, fam := range []string{"-4", "-6"} {
		var routes []struct {
			Dst  string `json:"dst"`
			Dev  string `json:"dev"`
			Type string `json:"type"`
		}
		if err := ipJSON(&routes, fam, "route", "show", "table", "main"); err != nil {
			return nil, err
		}
		for _, r := range routes {
			p, err := parseDst(r.Dst, fam == "-6")
			if err != nil || p.Bits() == 0 || p.Addr().IsLinkLocalUnicast() || p.Addr().IsMulticast() {
				continue
			}
			dev := r.Dev
			if dev == "" {
				dev = r.Type
			}
			out = append(out, HostNet{Prefix: p, Dev: dev, Kind: "route"})
		}
	}
	return out, nil
}

func parseDst(dst string, v6 bool) (netip.Prefix, error) {
	if dst == "default" {
		return netip.Prefix{}, errors.New("default")
	}
	if p, err := netip.ParsePrefix(dst); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(dst)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// StateFile is where the network's record is (for Down).
func (nw *Network) StateFile() string { return nw.cfg.StateFile }
