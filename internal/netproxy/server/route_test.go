package server

import (
	"reflect"
	"testing"

	"sigs.k8s.io/apiserver-network-proxy/proto/header"
)

func TestEligible(t *testing.T) {
	mk := func(id, q string, draining bool) Identity {
		ids, err := header.GenAgentIdentifiers(q)
		if err != nil {
			t.Fatal(err)
		}
		i, _ := NewIdentity(id, ids)
		i.Draining = draining
		return i
	}
	agents := []Identity{
		mk("a", "host=node-a&ipv4=10.0.0.1", false),
		mk("b", "ipv6=fd00::2&cidr=10.1.0.0/16", false),
		mk("c", "default-route=true", false),
	}
	dh := []Strategy{StrategyDestHost}
	all := []Strategy{StrategyDestHost, StrategyDefaultRoute, StrategyDefault}
	for _, tc := range []struct {
		name       string
		strategies []Strategy
		address    string
		agents     []Identity
		want       []int
		wantS      Strategy
	}{
		{"host name", dh, "node-a:10250", agents, []int{0}, StrategyDestHost},
		{"host name case-insensitive", dh, "NODE-A:10250", agents, []int{0}, StrategyDestHost},
		{"ipv4", dh, "10.0.0.1:443", agents, []int{0}, StrategyDestHost},
		{"ipv6 bracketed", dh, "[fd00::2]:443", agents, []int{1}, StrategyDestHost},
		{"inside cidr", dh, "10.1.200.3:80", agents, []int{1}, StrategyDestHost},
		{"outside everything", dh, "192.168.0.1:80", agents, nil, ""},
		{"destHost misses, defaultRoute", all, "192.168.0.1:80", agents, []int{2}, StrategyDefaultRoute},
		{"destHost wins over defaultRoute", all, "10.0.0.1:80", agents, []int{0}, StrategyDestHost},
		{"default is anyone", []Strategy{StrategyDefault}, "x:1", agents, []int{0, 1, 2}, StrategyDefault},
		{"defaultRoute only, none", []Strategy{StrategyDefaultRoute}, "x:1", agents[:2], nil, ""},
		{"address without port", dh, "10.0.0.1", agents, []int{0}, StrategyDestHost},
		{"draining agent avoided", []Strategy{StrategyDefault}, "x:1",
			[]Identity{mk("a", "", true), mk("b", "", false)}, []int{1}, StrategyDefault},
		{"draining agent used when alone", []Strategy{StrategyDefault}, "x:1",
			[]Identity{mk("a", "", true)}, []int{0}, StrategyDefault},
		{"no agents", all, "x:1", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, s := Eligible(tc.strategies, tc.address, tc.agents)
			if !reflect.DeepEqual(got, tc.want) || s != tc.wantS {
				t.Errorf("Eligible = %v, %q; want %v, %q", got, s, tc.want, tc.wantS)
			}
		})
	}
}

func TestParseStrategies(t *testing.T) {
	got, err := ParseStrategies("destHost, defaultRoute,default")
	if err != nil || !reflect.DeepEqual(got, []Strategy{StrategyDestHost, StrategyDefaultRoute, StrategyDefault}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "nope", "default,bogus"} {
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
