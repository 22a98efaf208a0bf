package dataplane

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestRouted(t *testing.T) {
	for _, tc := range []struct {
		name string
		ls   []api.Listener
		want bool
	}{
		{"every listener has a backend port: proxied", []api.Listener{{Protocol: "TCP", Port: 80, BackendPort: 30080}, {Protocol: "UDP", Port: 53, BackendPort: 30053}}, false},
		{"none has one: routed", []api.Listener{{Protocol: "TCP", Port: 80}}, true},
		{"one lacks it: routed (routing is per VIP)", []api.Listener{{Protocol: "TCP", Port: 80, BackendPort: 30080}, {Protocol: "TCP", Port: 443}}, true},
		{"no listeners: proxied (nothing to route)", nil, false},
	} {
		if got := routed(tc.ls); got != tc.want {
			t.Errorf("%s: routed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRoutedVIPs(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	v4, v6 := a("198.18.1.10"), a("fd01::10")
	n1, n2, n6 := a("198.18.0.3"), a("198.18.0.2"), a("fd02::3")
	tcp80 := api.Listener{Protocol: "TCP", Port: 80}
	udp80 := api.Listener{Protocol: "UDP", Port: 80}
	ports := []RoutedPort{{"TCP", 80}, {"UDP", 80}}
	for _, tc := range []struct {
		name  string
		cfg   Config
		ready []netip.Addr
		want  []RoutedVIP
	}{
		{"every client, the ready backends sorted",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80, udp80}}, []netip.Addr{n1, n2},
			[]RoutedVIP{{VIP: v4, Ports: ports, Sources: []netip.Prefix{}, Via: []netip.Addr{n2, n1}}}},
		{"no ready backend: nothing forwarded",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80}}, nil,
			[]RoutedVIP{{VIP: v4, Ports: []RoutedPort{{"TCP", 80}}, Sources: []netip.Prefix{}, Via: []netip.Addr{}}}},
		{"a listener twice (one port per protocol): once",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80, tcp80}}, []netip.Addr{n1},
			[]RoutedVIP{{VIP: v4, Ports: []RoutedPort{{"TCP", 80}}, Sources: []netip.Prefix{}, Via: []netip.Addr{n1}}}},
		{"dual-stack: each VIP its own family's backends and ranges",
			Config{VIPs: []netip.Addr{v4, v6}, Listeners: []api.Listener{tcp80}, SourceRanges: []netip.Prefix{p("10.0.0.0/8"), p("fd00:1::/64")}},
			[]netip.Addr{n1, n6},
			[]RoutedVIP{
				{VIP: v4, Ports: []RoutedPort{{"TCP", 80}}, Sources: []netip.Prefix{p("10.0.0.0/8")}, Via: []netip.Addr{n1}},
				{VIP: v6, Ports: []RoutedPort{{"TCP", 80}}, Sources: []netip.Prefix{p("fd00:1::/64")}, Via: []netip.Addr{n6}}}},
		{"ranges of the other family only: no client of this one, nothing forwarded (not everyone)",
			Config{VIPs: []netip.Addr{v4}, Listeners: []api.Listener{tcp80}, SourceRanges: []netip.Prefix{p("fd00:1::/64")}}, []netip.Addr{n1},
			[]RoutedVIP{{VIP: v4, Ports: []RoutedPort{{"TCP", 80}}, Sources: []netip.Prefix{}, Via: []netip.Addr{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := routedVIPs(tc.cfg, tc.ready); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("routedVIPs =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}
