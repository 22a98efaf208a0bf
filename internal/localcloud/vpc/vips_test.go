package vpc

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestVIPRules(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	rule := func(s string) []string { return strings.Fields(s) }
	for _, tc := range []struct {
		name string
		r    RoutedVIP
		want [][]string
	}{
		{"every client: one rule per port",
			RoutedVIP{VIP: a("198.18.1.10"), Ports: []VIPPort{{"TCP", 80}, {"UDP", 53}}},
			[][]string{
				rule("pref 500 from all to 198.18.1.10/32 ipproto tcp dport 80 table 245"),
				rule("pref 500 from all to 198.18.1.10/32 ipproto udp dport 53 table 245")}},
		{"source ranges × ports, masked",
			RoutedVIP{VIP: a("198.18.1.10"), Ports: []VIPPort{{"TCP", 80}}, Sources: []netip.Prefix{p("10.1.2.3/8"), p("198.19.255.0/24")}},
			[][]string{
				rule("pref 500 from 10.0.0.0/8 to 198.18.1.10/32 ipproto tcp dport 80 table 245"),
				rule("pref 500 from 198.19.255.0/24 to 198.18.1.10/32 ipproto tcp dport 80 table 245")}},
		{"IPv6 VIP: its family's ranges only, /128",
			RoutedVIP{VIP: a("fd01::10"), Ports: []VIPPort{{"TCP", 80}}, Sources: []netip.Prefix{p("10.0.0.0/8"), p("fd00:1::/64")}},
			[][]string{rule("pref 500 from fd00:1::/64 to fd01::10/128 ipproto tcp dport 80 table 245")}},
		{"ranges of the other family only: no rule (no client allowed, not everyone)",
			RoutedVIP{VIP: a("198.18.1.10"), Ports: []VIPPort{{"TCP", 80}}, Sources: []netip.Prefix{p("fd00:1::/64")}},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := vipRules(tc.r); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("vipRules =\n %q\nwant\n %q", got, tc.want)
			}
		})
	}
}

func TestVIPRoute(t *testing.T) {
	a := netip.MustParseAddr
	vip := a("198.18.1.10")
	for _, tc := range []struct {
		name string
		via  []netip.Addr
		want string
	}{
		{"no machine: no route (refused)", nil, ""},
		{"one machine", []netip.Addr{a("198.18.0.2")}, "198.18.1.10/32 table 245 proto static via 198.18.0.2 dev br"},
		{"several: multipath", []netip.Addr{a("198.18.0.2"), a("198.18.0.3")},
			"198.18.1.10/32 table 245 proto static nexthop via 198.18.0.2 dev br nexthop via 198.18.0.3 dev br"},
	} {
		if got := strings.Join(vipRoute(RoutedVIP{VIP: vip, Via: tc.via}, "br"), " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
