package server

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// Strategy is one of upstream's --proxy-strategies values, or Portside's
// own portsideDestCIDR.
type Strategy string

const (
	StrategyDefault      Strategy = "default"
	StrategyDestHost     Strategy = "destHost"
	StrategyDefaultRoute Strategy = "defaultRoute"
	// StrategyDestCIDR routes a dial to an agent whose cidr= identifiers
	// hold the destination address. Upstream has no CIDR routing (its
	// destHost compares strings), so it is a strategy of its own, with a
	// name upstream will not take, rather than a widening of destHost that
	// would route differently from upstream's servers in the same fleet.
	StrategyDestCIDR Strategy = "portsideDestCIDR"
)

// ParseStrategies reads a comma-ordered --proxy-strategies value.
func ParseStrategies(s string) ([]Strategy, error) {
	var out []Strategy
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch Strategy(p) {
		case StrategyDefault, StrategyDestHost, StrategyDefaultRoute, StrategyDestCIDR:
			out = append(out, Strategy(p))
		case "":
		default:
			return nil, fmt.Errorf("unknown proxy strategy %q in --proxy-strategies (want default, destHost, defaultRoute or %s)", p, StrategyDestCIDR)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no proxy strategy given")
	}
	return out, nil
}

// Identity is what routing knows of one connected agent.
type Identity struct {
	AgentID      string
	Hosts        []string // host, ipv4 and ipv6 identifiers, compared as exact strings (destHost)
	CIDRs        []netip.Prefix
	DefaultRoute bool
	Draining     bool
}

// NewIdentity parses an agent's identifiers; malformed CIDRs are dropped
// (and returned for logging) rather than rejecting the agent, as upstream
// fails open on identifiers it does not understand.
func NewIdentity(agentID string, ids header.Identifiers) (Identity, []string) {
	id := Identity{AgentID: agentID, DefaultRoute: ids.DefaultRoute}
	id.Hosts = append(append(append(id.Hosts, ids.Host...), ids.IPv4...), ids.IPv6...)
	var bad []string
	for _, c := range ids.CIDR {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			bad = append(bad, c)
			continue
		}
		// A dial's host is unmapped before matching (serves), so an
		// IPv4-mapped CIDR (::ffff:10.0.0.0/104) is kept as the IPv4 one
		// it means, or it would never match anything.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		id.CIDRs = append(id.CIDRs, p.Masked())
	}
	return id, bad
}

// DialHost is the host destHost looks up for a dial address, by
// upstream's rules (RemovePortFromHost), so that a fleet mixing upstream
// and Portside servers routes every dial alike: an address with at most
// one colon is cut at it ("node-a:10250" is "node-a"); one with more is
// IPv6, whose port is cut only when it is bracketed ("[fd00::2]:443" is
// "fd00::2", "fd00::2" stays). Brackets are then trimmed. Nothing is
// canonicalised: no lower-casing, no IP parsing.
func DialHost(address string) string {
	if strings.Count(address, ":") < 2 {
		h, _, _ := strings.Cut(address, ":")
		return h
	}
	if strings.Contains(address, "[") {
		address = address[:strings.LastIndexByte(address, ':')]
	}
	return strings.Trim(address, "[]")
}

// claimsHost reports whether the agent advertised host (as host=, ipv4= or
// ipv6=) byte for byte: upstream keys its destHost agents by the
// identifier strings, so "NODE-A" is not "node-a" and "fd00:0::2" is not
// "fd00::2".
func (id *Identity) claimsHost(host string) bool {
	return host != "" && slices.Contains(id.Hosts, host)
}

// inCIDR reports whether host is an address inside one of the agent's
// cidr= identifiers (portsideDestCIDR).
func (id *Identity) inCIDR(host string) bool {
	if len(id.CIDRs) == 0 {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range id.CIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Eligible returns the indexes of the agents that may serve a dial to
// address: those of the first strategy, in configured order, that matches
// any agent. Draining agents are used only when no other agent matches
// that strategy, so a rolling agent update does not fail dials.
func Eligible(strategies []Strategy, address string, agents []Identity) ([]int, Strategy) {
	host := DialHost(address)
	for _, s := range strategies {
		var live, draining []int
		for i := range agents {
			a := &agents[i]
			ok := false
			switch s {
			case StrategyDefault:
				ok = true
			case StrategyDestHost:
				ok = a.claimsHost(host)
			case StrategyDestCIDR:
				ok = a.inCIDR(host)
			case StrategyDefaultRoute:
				ok = a.DefaultRoute
			}
			if !ok {
				continue
			}
			if a.Draining {
				draining = append(draining, i)
			} else {
				live = append(live, i)
			}
		}
		if len(live) > 0 {
			return live, s
		}
		if len(draining) > 0 {
			return draining, s
		}
	}
	return nil, ""
}

// StillRoutes reports whether an agent with identity id may still carry
// a connection to address that strategy s chose it for. A connection is
// granted by the identifier it was routed by; when the agent's Node stops
// listing that name or address (changed, deleted, or contested by another
// Node), the grant is gone, and so is the connection (revoke.go), not
// only new dials. default chose any agent, so nothing revokes it; a
// draining agent still serves what it holds.
func StillRoutes(s Strategy, address string, id *Identity) bool {
	switch s {
	case StrategyDestHost:
		return id.claimsHost(DialHost(address))
	case StrategyDestCIDR:
		return id.inCIDR(DialHost(address))
	case StrategyDefaultRoute:
		return id.DefaultRoute
	}
	return true
}

// ReadyBackends is ready_backends{proxy_strategy} as upstream counts it,
// the size of each strategy's agent table: distinct agent IDs for default,
// and for defaultRoute those with default-route=true; distinct host/ipv4/
// ipv6 identifiers for destHost (upstream keys that table by identifier,
// so one node's agent counts once per name and address it claims).
// portsideDestCIDR counts the distinct agent IDs with a cidr=. Draining
// agents count: they still serve.
func ReadyBackends(strategies []Strategy, agents []Identity) map[Strategy]int {
	out := make(map[Strategy]int, len(strategies))
	for _, s := range strategies {
		keys := map[string]bool{}
		for i := range agents {
			for _, k := range readyKeys(s, &agents[i]) {
				keys[k] = true
			}
		}
		out[s] = len(keys)
	}
	return out
}

// readyKeys are the keys an agent puts in a strategy's table (see
// ReadyBackends).
func readyKeys(s Strategy, a *Identity) []string {
	switch s {
	case StrategyDefault:
		return []string{a.AgentID}
	case StrategyDefaultRoute:
		if a.DefaultRoute {
			return []string{a.AgentID}
		}
	case StrategyDestCIDR:
		if len(a.CIDRs) > 0 {
			return []string{a.AgentID}
		}
	case StrategyDestHost:
		return a.Hosts
	}
	return nil
}

var allStrategies = []Strategy{StrategyDefault, StrategyDestHost, StrategyDefaultRoute, StrategyDestCIDR}

// readyCounter keeps ReadyBackends' counts as agents come, go and change
// identity, so an agent's connection costs its own keys, not a pass over
// every agent (a fleet reconnecting after a server restart).
type readyCounter struct {
	refs map[Strategy]map[string]int
}

func (c *readyCounter) apply(a *Identity, delta int) {
	if c.refs == nil {
		c.refs = map[Strategy]map[string]int{}
		for _, s := range allStrategies {
			c.refs[s] = map[string]int{}
		}
	}
	for _, s := range allStrategies {
		m := c.refs[s]
		for _, k := range readyKeys(s, a) {
			if m[k] += delta; m[k] <= 0 {
				delete(m, k)
			}
		}
	}
}

func (c *readyCounter) add(a *Identity)    { c.apply(a, 1) }
func (c *readyCounter) remove(a *Identity) { c.apply(a, -1) }

// counts is ReadyBackends(strategies, the agents added and not removed).
func (c *readyCounter) counts(strategies []Strategy) map[Strategy]int {
	out := make(map[Strategy]int, len(strategies))
	for _, s := range strategies {
		out[s] = len(c.refs[s])
	}
	return out
}

// Choose picks the agent for a dial among those Eligible returns (agents
// in the order they connected): under destHost the first, as upstream's
// destHost gives a host to the agent that registered it first (so servers
// of both kinds in one fleet send a host's dials to the same agent);
// under the other strategies uniformly, with intn (rand.IntN outside
// tests).
func Choose(strategies []Strategy, address string, agents []Identity, intn func(int) int) (int, Strategy) {
	idx, s := Eligible(strategies, address, agents)
	switch {
	case len(idx) == 0:
		return -1, ""
	case len(idx) == 1 || s == StrategyDestHost:
		return idx[0], s
	}
	return idx[intn(len(idx))], s
}
