package server

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"

	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// Strategy is one of upstream's --proxy-strategies values.
type Strategy string

const (
	StrategyDefault      Strategy = "default"
	StrategyDestHost     Strategy = "destHost"
	StrategyDefaultRoute Strategy = "defaultRoute"
)

// ParseStrategies reads a comma-ordered --proxy-strategies value.
func ParseStrategies(s string) ([]Strategy, error) {
	var out []Strategy
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch Strategy(p) {
		case StrategyDefault, StrategyDestHost, StrategyDefaultRoute:
			out = append(out, Strategy(p))
		case "":
		default:
			return nil, fmt.Errorf("unknown proxy strategy %q (want default, destHost or defaultRoute)", p)
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
	Hosts        []string // host, ipv4 and ipv6 identifiers, compared as strings
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

// DialHost is the host part of a dial address ("10.0.0.1:443", "[::1]:80",
// or a bare host).
func DialHost(address string) string {
	if h, _, err := net.SplitHostPort(address); err == nil {
		return h
	}
	return strings.Trim(address, "[]")
}

// serves reports whether the agent claims host by destHost rules.
func (id *Identity) serves(host string) bool {
	for _, h := range id.Hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
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
				ok = a.serves(host)
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

// pick chooses uniformly among eligible indexes.
func pick(idx []int) int {
	if len(idx) == 1 {
		return idx[0]
	}
	return idx[rand.IntN(len(idx))]
}
