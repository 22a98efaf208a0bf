package server

import (
	"net"
	"net/url"
	"slices"
	"testing"

	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// FuzzAgentRouting decodes an agent's stream metadata (the url-encoded
// agentIdentifiers header), a --proxy-strategies value and a dial address
// as the server does, and routes the dial. Properties:
//   - nothing panics;
//   - every CIDR identifier is either kept (masked) or reported as bad;
//   - ParseStrategies returns only known strategies;
//   - Eligible returns distinct in-range indexes, none exactly when it
//     returns no strategy, all of the same draining state, and only agents
//     the strategy matches; the default strategy always finds an agent;
//   - an agent that advertises the dial's host (host=) is eligible under
//     destHost for a dial to it, and chosen when it connected first; a
//     CIDR holding an address (cidr=) makes it eligible under
//     portsideDestCIDR, never under destHost.
func FuzzAgentRouting(f *testing.F) {
	f.Add("host=node-1&ipv4=10.0.0.5&cidr=10.0.0.0/24&default-route=true", "destHost,default", "10.0.0.7:443", false)
	f.Add("ipv6=fd00::5&cidr=fd00::/64", "destHost,defaultRoute,default", "[fd00::9]:10250", true)
	f.Add("cidr=bogus&cidr=10.1.2.3/8&host=A", "destHost", "a:80", false)
	f.Add("%zz", "default", "x", false)
	f.Add("default-route=&default-route=1", " , ", "[::1]", true)
	f.Add("cidr=::ffff:10.0.0.0/104", "portsideDestCIDR", "10.0.0.1:80", false)
	f.Add("cidr=10.0.0.0/8", "destHost,portsideDestCIDR", "10.0.0.1:80", false)
	f.Fuzz(func(t *testing.T, identifiers, strategies, address string, draining bool) {
		ids, err := header.GenAgentIdentifiers(identifiers)
		if err != nil {
			return // the server refuses the agent (InvalidArgument)
		}
		id, bad := NewIdentity("a1", ids)
		if len(id.CIDRs)+len(bad) != len(ids.CIDR) {
			t.Fatalf("%d CIDRs kept and %d bad of %d", len(id.CIDRs), len(bad), len(ids.CIDR))
		}
		for _, p := range id.CIDRs {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("kept CIDR %v is not a valid masked prefix", p)
			}
		}
		id.Draining = draining
		strats, err := ParseStrategies(strategies)
		if err != nil {
			if strats != nil {
				t.Fatalf("strategies %v with error %v", strats, err)
			}
			strats = []Strategy{StrategyDestHost, StrategyDefault}
		}
		for _, s := range strats {
			if s != StrategyDefault && s != StrategyDestHost && s != StrategyDefaultRoute && s != StrategyDestCIDR {
				t.Fatalf("ParseStrategies(%q) gave %q", strategies, s)
			}
		}
		host := DialHost(address)
		other := Identity{AgentID: "a2", Hosts: []string{"unrelated.example"}}
		agents := []Identity{other, id}
		idx, s := Eligible(strats, address, agents)
		if (len(idx) == 0) != (s == "") {
			t.Fatalf("Eligible = %v, %q", idx, s)
		}
		if s != "" && !slices.Contains(strats, s) {
			t.Fatalf("Eligible used strategy %q, not among %v", s, strats)
		}
		if slices.Contains(strats, StrategyDefault) && len(idx) == 0 {
			t.Fatalf("no agent eligible with %v", strats)
		}
		seen := map[int]bool{}
		for _, i := range idx {
			if i < 0 || i >= len(agents) || seen[i] {
				t.Fatalf("Eligible indexes %v", idx)
			}
			seen[i] = true
			if agents[i].Draining != agents[idx[0]].Draining {
				t.Fatalf("Eligible mixes draining and live agents: %v", idx)
			}
			a := agents[i]
			if (s == StrategyDestHost && !a.claimsHost(host)) || (s == StrategyDestCIDR && !a.inCIDR(host)) ||
				(s == StrategyDefaultRoute && !a.DefaultRoute) {
				t.Fatalf("agent %+v chosen under %s for %q", a, s, address)
			}
		}
		// An agent claiming the host is eligible for it.
		if host != "" {
			claim, _ := header.GenAgentIdentifiers("host=" + url.QueryEscape(host))
			cid, _ := NewIdentity("a3", claim)
			if idx, s := Eligible([]Strategy{StrategyDestHost}, address, []Identity{other, cid}); s != StrategyDestHost || !slices.Contains(idx, 1) {
				t.Fatalf("an agent with host=%q is not eligible for %q: %v %q", host, address, idx, s)
			}
			if i, _ := Choose([]Strategy{StrategyDestHost}, address, []Identity{cid, cid, other}, func(n int) int { return n - 1 }); i != 0 {
				t.Fatalf("destHost chose agent %d of two claiming %q, not the first", i, host)
			}
		}
		// An agent claiming a CIDR serves the CIDR's first address under
		// portsideDestCIDR, and destHost ignores CIDRs.
		for _, p := range id.CIDRs {
			dial := net.JoinHostPort(p.Addr().String(), "443")
			if !id.inCIDR(DialHost(dial)) {
				t.Fatalf("agent with cidr %v does not serve %s (dial %s)", p, p.Addr(), dial)
			}
			cidrOnly := Identity{AgentID: "a4", CIDRs: id.CIDRs}
			if idx, _ := Eligible([]Strategy{StrategyDestHost}, dial, []Identity{cidrOnly}); idx != nil {
				t.Fatalf("agent with only cidr %v eligible under destHost for %s", p, dial)
			}
		}
	})
}
