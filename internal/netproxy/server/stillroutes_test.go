package server

import (
	"testing"
)

// TestStillRoutes: a connection's grant is the identifier it was routed
// by; it stands while the agent still holds that identifier.
func TestStillRoutes(t *testing.T) {
	cases := []struct {
		name    string
		s       Strategy
		address string
		agent   string // agentIdentifiers after the change
		want    bool
	}{
		{"destHost: address still listed", StrategyDestHost, "10.0.0.1:10250", "host=node-a&ipv4=10.0.0.1", true},
		{"destHost: address no longer listed", StrategyDestHost, "10.0.0.1:10250", "host=node-a&ipv4=10.0.0.2", false},
		{"destHost: all claims revoked (Node deleted)", StrategyDestHost, "10.0.0.1:10250", "", false},
		{"destHost: by name, name kept", StrategyDestHost, "node-a:10250", "host=node-a", true},
		{"destHost: by name, name gone, address kept", StrategyDestHost, "node-a:10250", "ipv4=10.0.0.1", false},
		{"destHost: ipv6", StrategyDestHost, "[fd00::2]:10250", "ipv6=fd00::2", true},
		{"destHost: ipv6 gone", StrategyDestHost, "[fd00::2]:10250", "ipv4=10.0.0.1", false},
		{"destHost: exact strings, as routing compares them", StrategyDestHost, "NODE-A:10250", "host=node-a", false},
		{"CIDR: still inside", StrategyDestCIDR, "10.1.2.3:80", "cidr=10.1.0.0/16", true},
		{"CIDR: range narrowed", StrategyDestCIDR, "10.1.2.3:80", "cidr=10.1.3.0/24", false},
		{"CIDR: range dropped", StrategyDestCIDR, "10.1.2.3:80", "host=node-a", false},
		{"defaultRoute: kept", StrategyDefaultRoute, "203.0.113.9:443", "default-route=true", true},
		{"defaultRoute: dropped", StrategyDefaultRoute, "203.0.113.9:443", "cidr=10.0.0.0/8", false},
		{"default: any agent, never revoked", StrategyDefault, "10.0.0.1:10250", "", true},
		{"draining agent keeps what it holds", StrategyDestHost, "10.0.0.1:10250", "ipv4=10.0.0.1", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := routeAgents(t, []string{tc.agent})[0]
			if tc.name == "draining agent keeps what it holds" {
				id.Draining = true
			}
			if got := StillRoutes(tc.s, tc.address, &id); got != tc.want {
				t.Errorf("StillRoutes(%s, %s, %q) = %v; want %v", tc.s, tc.address, tc.agent, got, tc.want)
			}
		})
	}
}

// TestStillRoutesAgreesWithEligible: every agent routing chose, the
// revocation check keeps, for every routing case (so a connection is
// never revoked by the identity it was routed with).
func TestStillRoutesAgreesWithEligible(t *testing.T) {
	for _, tc := range routeCases {
		strategies, err := ParseStrategies(tc.strategies)
		if err != nil {
			t.Fatal(err)
		}
		agents := routeAgents(t, tc.agents)
		idx, s := Eligible(strategies, tc.address, agents)
		for _, i := range idx {
			if !StillRoutes(s, tc.address, &agents[i]) {
				t.Errorf("%s: agent %d chosen under %s but StillRoutes says no", tc.name, i, s)
			}
		}
	}
}
