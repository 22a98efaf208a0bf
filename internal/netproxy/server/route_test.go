package server

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

// routeCase is one routing decision. upstream marks the cases upstream's
// v0.34.0 server can take (its strategies, no draining agents):
// TestRoutingMatchesUpstream runs those against upstream's own code.
type routeCase struct {
	name       string
	strategies string
	agents     []string // agentIdentifiers, in connection order
	address    string
	want       []int // the eligible agents; under destHost want[0] is chosen
	wantS      Strategy
	upstream   bool
}

var routeCases = []routeCase{
	// destHost is upstream's: an exact string lookup of the dial's host
	// among host=, ipv4= and ipv6= identifiers.
	{"host name", "destHost", []string{"host=node-a&ipv4=10.0.0.1"}, "node-a:10250", []int{0}, StrategyDestHost, true},
	{"host name of another case", "destHost", []string{"host=node-a"}, "NODE-A:10250", nil, "", true},
	{"claimed host of another case", "destHost", []string{"host=Node-A"}, "node-a:10250", nil, "", true},
	{"host with a trailing dot", "destHost", []string{"host=node-a"}, "node-a.:10250", nil, "", true},
	{"ipv4", "destHost", []string{"host=node-a&ipv4=10.0.0.1"}, "10.0.0.1:443", []int{0}, StrategyDestHost, true},
	{"ipv4 without port", "destHost", []string{"ipv4=10.0.0.1"}, "10.0.0.1", []int{0}, StrategyDestHost, true},
	{"ipv4 in brackets", "destHost", []string{"ipv4=10.0.0.1"}, "[10.0.0.1]:443", nil, "", true},
	{"ipv6 bracketed", "destHost", []string{"ipv6=fd00::2"}, "[fd00::2]:443", []int{0}, StrategyDestHost, true},
	{"ipv6 bare", "destHost", []string{"ipv6=fd00::2"}, "fd00::2", []int{0}, StrategyDestHost, true},
	{"ipv6 bracketed without port", "destHost", []string{"ipv6=fd00::2"}, "[fd00::2]", nil, "", true},
	{"ipv6 not canonical", "destHost", []string{"ipv6=fd00:0::2"}, "[fd00::2]:443", nil, "", true},
	{"ipv6 upper case", "destHost", []string{"ipv6=fd00::2"}, "[FD00::2]:443", nil, "", true},
	{"ipv4-mapped ipv6", "destHost", []string{"ipv4=10.0.0.1"}, "[::ffff:10.0.0.1]:443", nil, "", true},
	{"a host claimed as ipv4", "destHost", []string{"ipv4=node-a"}, "node-a:1", []int{0}, StrategyDestHost, true},
	{"cidr is not destHost", "destHost", []string{"cidr=10.1.0.0/16"}, "10.1.200.3:80", nil, "", true},
	{"cidr string is not destHost", "destHost", []string{"cidr=10.1.0.0/16"}, "10.1.0.0/16", nil, "", true},
	{"empty host", "destHost", []string{"host="}, ":443", nil, "", true},
	{"default-route is not destHost", "destHost", []string{"default-route=true"}, "10.0.0.1:443", nil, "", true},
	{"first agent of a host wins", "destHost", []string{"host=node-a", "host=node-a"}, "node-a:1", []int{0, 1}, StrategyDestHost, true},
	{"first agent of an address wins, by any kind", "destHost", []string{"ipv4=10.0.0.1", "host=10.0.0.1"}, "10.0.0.1:1", []int{0, 1}, StrategyDestHost, true},
	{"a later agent that claims it", "destHost", []string{"host=node-b", "host=node-a"}, "node-a:1", []int{1}, StrategyDestHost, true},
	// Strategies in order.
	{"destHost misses, defaultRoute", "destHost,defaultRoute,default",
		[]string{"host=node-a", "default-route=true"}, "192.168.0.1:80", []int{1}, StrategyDefaultRoute, true},
	{"destHost wins over defaultRoute", "destHost,defaultRoute",
		[]string{"default-route=true", "host=node-a"}, "node-a:80", []int{1}, StrategyDestHost, true},
	{"destHost misses, default", "destHost,default", []string{"host=node-a", "host=node-b"}, "x:1", []int{0, 1}, StrategyDefault, true},
	{"default is anyone", "default", []string{"host=node-a", "default-route=true", ""}, "x:1", []int{0, 1, 2}, StrategyDefault, true},
	{"defaultRoute only, none", "defaultRoute", []string{"host=node-a", "cidr=0.0.0.0/0"}, "x:1", nil, "", true},
	{"default-route=false", "defaultRoute", []string{"default-route=false"}, "x:1", nil, "", true},
	{"no agents", "destHost,defaultRoute,default", nil, "x:1", nil, "", true},
	// portsideDestCIDR: Portside's CIDR routing, under its own name.
	{"inside cidr", "portsideDestCIDR", []string{"host=node-a", "cidr=10.1.0.0/16"}, "10.1.200.3:80", []int{1}, StrategyDestCIDR, false},
	{"outside cidr", "portsideDestCIDR", []string{"cidr=10.1.0.0/16"}, "10.2.0.1:80", nil, "", false},
	{"cidr of a host name", "portsideDestCIDR", []string{"cidr=10.1.0.0/16"}, "node-a:80", nil, "", false},
	{"ipv6 cidr", "portsideDestCIDR", []string{"cidr=fd00::/64"}, "[fd00::9]:10250", []int{0}, StrategyDestCIDR, false},
	{"ipv4-mapped cidr", "portsideDestCIDR", []string{"cidr=::ffff:10.0.0.0/104"}, "10.0.0.1:80", []int{0}, StrategyDestCIDR, false},
	{"destHost before portsideDestCIDR", "destHost,portsideDestCIDR",
		[]string{"cidr=10.0.0.0/8", "ipv4=10.0.0.1"}, "10.0.0.1:80", []int{1}, StrategyDestHost, false},
	{"portsideDestCIDR after destHost misses", "destHost,portsideDestCIDR,default",
		[]string{"ipv4=10.0.0.1", "cidr=10.0.0.0/8"}, "10.0.0.2:80", []int{1}, StrategyDestCIDR, false},
}

func routeAgents(t testing.TB, queries []string) []Identity {
	t.Helper()
	var out []Identity
	for i, q := range queries {
		ids, err := header.GenAgentIdentifiers(q)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := NewIdentity(string(rune('a'+i)), ids)
		out = append(out, id)
	}
	return out
}

func TestEligible(t *testing.T) {
	for _, tc := range routeCases {
		t.Run(tc.name, func(t *testing.T) {
			strategies, err := ParseStrategies(tc.strategies)
			if err != nil {
				t.Fatal(err)
			}
			agents := routeAgents(t, tc.agents)
			got, s := Eligible(strategies, tc.address, agents)
			if !reflect.DeepEqual(got, tc.want) || s != tc.wantS {
				t.Errorf("Eligible = %v, %q; want %v, %q", got, s, tc.want, tc.wantS)
			}
			// Choose: destHost takes the first agent, whatever intn says;
			// the others draw with intn.
			for _, draw := range []int{0, len(tc.want) - 1} {
				i, s := Choose(strategies, tc.address, agents, func(n int) int { return draw })
				switch {
				case tc.want == nil:
					if i != -1 || s != "" {
						t.Errorf("Choose = %d, %q; want none", i, s)
					}
				case tc.wantS == StrategyDestHost && i != tc.want[0]:
					t.Errorf("Choose = %d under destHost; want the first, %d", i, tc.want[0])
				case tc.wantS != StrategyDestHost && i != tc.want[draw]:
					t.Errorf("Choose = %d with draw %d; want %d", i, draw, tc.want[draw])
				}
			}
		})
	}
}

func TestEligibleDraining(t *testing.T) {
	mk := func(draining ...bool) []Identity {
		agents := routeAgents(t, make([]string, len(draining)))
		for i, d := range draining {
			agents[i].Hosts, agents[i].Draining = []string{"node-a"}, d
		}
		return agents
	}
	for _, tc := range []struct {
		name     string
		strategy Strategy
		agents   []Identity
		want     []int
	}{
		// Portside, not upstream: a draining agent is used only when no
		// live agent matches, so a rolling agent update does not fail dials.
		{"draining agent avoided", StrategyDefault, mk(true, false), []int{1}},
		{"draining agent used when alone", StrategyDefault, mk(true), []int{0}},
		{"draining first agent of a host skipped", StrategyDestHost, mk(true, false), []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := Eligible([]Strategy{tc.strategy}, "node-a:1", tc.agents); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Eligible = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestDialHost(t *testing.T) {
	for in, want := range map[string]string{
		"node-a:10250": "node-a", "10.0.0.1": "10.0.0.1", "[fd00::2]:443": "fd00::2", "fd00::2": "fd00::2",
		"[fd00::2]": "fd00:", "[10.0.0.1]:443": "[10.0.0.1]", "fd00::2:443": "fd00::2:443", ":443": "", "": "",
		"a:b:c": "a:b:c", "Node-A:1": "Node-A",
	} {
		if got := DialHost(in); got != want {
			t.Errorf("DialHost(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestParseStrategies(t *testing.T) {
	got, err := ParseStrategies("destHost, defaultRoute,default,portsideDestCIDR")
	if err != nil || !slices.Equal(got, []Strategy{StrategyDestHost, StrategyDefaultRoute, StrategyDefault, StrategyDestCIDR}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "nope", "default,bogus", "desthost", "destCIDR"} {
		if _, err := ParseStrategies(bad); err == nil {
			t.Errorf("ParseStrategies(%q) accepted", bad)
		}
	}
}

func TestMalformedCIDRIgnored(t *testing.T) {
	id, bad := NewIdentity("a", header.Identifiers{CIDR: []string{"10.0.0.0/8", "nonsense"}})
	if len(id.CIDRs) != 1 || !reflect.DeepEqual(bad, []string{"nonsense"}) {
		t.Fatalf("cidrs %v bad %v", id.CIDRs, bad)
	}
}

func TestReadyBackends(t *testing.T) {
	agents := routeAgents(t, []string{"host=node-a&ipv4=10.0.0.1", "host=node-a&ipv6=fd00::1&default-route=true", "cidr=10.0.0.0/8", ""})
	agents[3].AgentID = agents[0].AgentID // the same agent twice: one key
	agents[3].Draining = true
	got := ReadyBackends([]Strategy{StrategyDestHost, StrategyDefaultRoute, StrategyDefault, StrategyDestCIDR}, agents)
	want := map[Strategy]int{
		StrategyDestHost:     3, // node-a, 10.0.0.1, fd00::1
		StrategyDefaultRoute: 1,
		StrategyDefault:      3, // a, b, c
		StrategyDestCIDR:     1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadyBackends = %v; want %v", got, want)
	}
	if got := ReadyBackends([]Strategy{StrategyDestHost, StrategyDefault}, nil); !reflect.DeepEqual(got, map[Strategy]int{StrategyDestHost: 0, StrategyDefault: 0}) {
		t.Errorf("ReadyBackends without agents = %v; want 0 per strategy", got)
	}
}

// TestReadyCounter: the counts kept as agents come, go and change identity
// are ReadyBackends of the agents present, at every step.
func TestReadyCounter(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	pool := []string{"host=node-a&ipv4=10.0.0.1", "host=node-a", "ipv6=fd00::1&default-route=true", "cidr=10.0.0.0/8", "", "host=node-b&cidr=10.1.0.0/16"}
	var c readyCounter
	var present []Identity
	for step := range 2000 {
		switch op := rnd.IntN(3); {
		case op == 0 || len(present) == 0: // an agent connects (IDs repeat: reconnects)
			id := routeAgents(t, []string{pool[rnd.IntN(len(pool))]})[0]
			id.AgentID = string(rune('a' + rnd.IntN(4)))
			c.add(&id)
			present = append(present, id)
		case op == 1: // one goes
			i := rnd.IntN(len(present))
			c.remove(&present[i])
			present = slices.Delete(present, i, i+1)
		default: // one's identity changes (its Node changed)
			i := rnd.IntN(len(present))
			c.remove(&present[i])
			next := routeAgents(t, []string{pool[rnd.IntN(len(pool))]})[0]
			present[i].Hosts, present[i].CIDRs, present[i].DefaultRoute = next.Hosts, next.CIDRs, next.DefaultRoute
			c.add(&present[i])
		}
		if got, want := c.counts(allStrategies), ReadyBackends(allStrategies, present); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: counts %v; ReadyBackends %v", step, got, want)
		}
	}
}
