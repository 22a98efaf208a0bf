package vpc

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestNATRules(t *testing.T) {
	a, ap, p := netip.MustParseAddr, netip.MustParseAddrPort, netip.MustParsePrefix
	two := []netip.AddrPort{ap("198.18.0.5:30080"), ap("198.18.0.6:30080")}
	for _, tc := range []struct {
		name    string
		f       ForwardedVIP
		want    []string
		wantErr string
	}{
		{"round robin per port", ForwardedVIP{VIP: a("198.18.4.10"), Ports: []ForwardedPort{
			{"TCP", 80, two}, {"UDP", 53, []netip.AddrPort{ap("198.18.0.5:30053")}}}},
			[]string{
				"tcp dport 80 ct mark set 0x00f50000 dnat ip to numgen inc mod 2 map { 0 : 198.18.0.5 . 30080, 1 : 198.18.0.6 . 30080 }",
				"udp dport 53 ct mark set 0x00f50000 dnat ip to numgen inc mod 1 map { 0 : 198.18.0.5 . 30053 }",
			}, ""},
		{"affinity hashes the client's address", ForwardedVIP{VIP: a("198.18.4.10"), Affinity: true, Ports: []ForwardedPort{{"tcp", 80, two}}},
			[]string{"tcp dport 80 ct mark set 0x00f50000 dnat ip to jhash ip saddr mod 2 map { 0 : 198.18.0.5 . 30080, 1 : 198.18.0.6 . 30080 }"}, ""},
		{"sources of the VIP's family only, masked, sorted, once", ForwardedVIP{VIP: a("198.18.4.10"),
			Sources: []netip.Prefix{p("198.19.255.7/24"), p("10.1.2.3/8"), p("fd00:1::/64"), p("10.0.0.0/8")}, Ports: []ForwardedPort{{"TCP", 80, two[:1]}}},
			[]string{"ip saddr { 10.0.0.0/8, 198.19.255.0/24 } tcp dport 80 ct mark set 0x00f50000 dnat ip to numgen inc mod 1 map { 0 : 198.18.0.5 . 30080 }"}, ""},
		{"sources given, none of the VIP's family: nothing forwarded", ForwardedVIP{VIP: a("198.18.4.10"),
			Sources: []netip.Prefix{p("fd00:1::/64")}, Ports: []ForwardedPort{{"TCP", 80, two}}}, nil, ""},
		{"a port without backends is left to the listeners", ForwardedVIP{VIP: a("198.18.4.10"), Ports: []ForwardedPort{{"TCP", 80, nil}, {"TCP", 443, two[1:]}}},
			[]string{"tcp dport 443 ct mark set 0x00f50000 dnat ip to numgen inc mod 1 map { 0 : 198.18.0.6 . 30080 }"}, ""},
		{"IPv6", ForwardedVIP{VIP: a("fd01:2::10"), Affinity: true, Sources: []netip.Prefix{p("fd00:1::1/64")},
			Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("[fd01::5]:30080")}}}},
			[]string{"ip6 saddr { fd00:1::/64 } tcp dport 80 ct mark set 0x00f50000 dnat ip6 to jhash ip6 saddr mod 1 map { 0 : fd01::5 . 30080 }"}, ""},
		{"a backend of the other family is refused", ForwardedVIP{VIP: a("fd01:2::10"), Ports: []ForwardedPort{{"TCP", 80, two}}}, nil, "other family"},
		{"SCTP is not forwarded", ForwardedVIP{VIP: a("198.18.4.10"), Ports: []ForwardedPort{{"SCTP", 80, two}}}, nil, "only TCP and UDP"},
		{"port 0", ForwardedVIP{VIP: a("198.18.4.10"), Ports: []ForwardedPort{{"TCP", 0, two}}}, nil, "out of range"},
		{"backend port 0", ForwardedVIP{VIP: a("198.18.4.10"), Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{ap("198.18.0.5:0")}}}}, nil, "no port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := natRules(tc.f)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestNATScript(t *testing.T) {
	vip := netip.MustParseAddr("198.18.4.10")
	fwd := ForwardedVIP{VIP: vip, Ports: []ForwardedPort{{"TCP", 80, []netip.AddrPort{netip.MustParseAddrPort("198.18.0.5:30080")}}}}
	none := ForwardedVIP{VIP: vip, Ports: []ForwardedPort{{"TCP", 80, nil}}}
	rule := "add rule inet portside_lb vip-c612040a tcp dport 80 ct mark set 0x00f50000 dnat ip to numgen inc mod 1 map { 0 : 198.18.0.5 . 30080 }\n"
	for _, tc := range []struct {
		name    string
		f       ForwardedVIP
		had     bool
		want    string
		wantHas bool
	}{
		{"new: chain, rules, then the map's entry", fwd, false,
			"add chain inet portside_lb vip-c612040a\nflush chain inet portside_lb vip-c612040a\n" + rule +
				"add element inet portside_lb vips4 { 198.18.4.10 : jump vip-c612040a }\n", true},
		{"changed: the chain refilled in the same transaction, the entry kept", fwd, true,
			"add chain inet portside_lb vip-c612040a\nflush chain inet portside_lb vip-c612040a\n" + rule, true},
		{"no backend left: entry and chain go", none, true,
			"delete element inet portside_lb vips4 { 198.18.4.10 }\ndelete chain inet portside_lb vip-c612040a\n", false},
		{"no backend, never forwarded: nothing to run", none, false, "", false},
		{"IPv6 uses its own map", ForwardedVIP{VIP: netip.MustParseAddr("fd01::a")}, true,
			"delete element inet portside_lb vips6 { fd01::a }\ndelete chain inet portside_lb vip-fd01000000000000000000000000000a\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, has, err := natScript(tc.f, tc.had)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || has != tc.wantHas {
				t.Fatalf("script (has %v):\n%s\nwant (has %v):\n%s", has, got, tc.wantHas, tc.want)
			}
		})
	}
}

func TestMatchFlow(t *testing.T) {
	ip := func(s string) net.IP { return net.ParseIP(s) }
	vip, be := netip.MustParseAddr("198.18.4.10"), netip.MustParseAddr("198.18.0.5")
	type flow struct {
		mark       uint32
		proto      uint8
		dst        net.IP
		dport      uint16
		replySrc   net.IP
		replySport uint16
	}
	ours := flow{natMark, 6, ip("198.18.4.10"), 80, ip("198.18.0.5"), 30080}
	for _, tc := range []struct {
		name string
		f    FlowFilter
		fl   flow
		want bool
	}{
		{"the backend's flow", FlowFilter{VIP: vip, Backend: be}, ours, true},
		{"port and backend port", FlowFilter{VIP: vip, Protocol: "TCP", Port: 80, Backend: be, BackendPort: 30080}, ours, true},
		{"not marked by the table: never ours", FlowFilter{VIP: vip}, flow{0, 6, ip("198.18.4.10"), 80, ip("198.18.0.5"), 30080}, false},
		{"another mark", FlowFilter{VIP: vip}, flow{natMark | 1, 6, ip("198.18.4.10"), 80, ip("198.18.0.5"), 30080}, false},
		{"another VIP", FlowFilter{VIP: netip.MustParseAddr("198.18.4.11")}, ours, false},
		{"another backend", FlowFilter{VIP: vip, Backend: netip.MustParseAddr("198.18.0.6")}, ours, false},
		{"another backend port", FlowFilter{VIP: vip, BackendPort: 30081}, ours, false},
		{"another listener port", FlowFilter{VIP: vip, Port: 443}, ours, false},
		{"UDP filter, TCP flow", FlowFilter{VIP: vip, Protocol: "udp"}, ours, false},
		{"IPv4 in IPv6 form", FlowFilter{VIP: vip, Backend: be}, flow{natMark, 6, ip("::ffff:198.18.4.10"), 80, ip("::ffff:198.18.0.5"), 1}, true},
		{"no address", FlowFilter{VIP: vip}, flow{natMark, 6, nil, 80, nil, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := tc.fl
			if got := matchFlow(tc.f, fl.mark, fl.proto, fl.dst, fl.dport, fl.replySrc, fl.replySport); got != tc.want {
				t.Fatalf("matchFlow = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNATSetup(t *testing.T) {
	p := netip.MustParsePrefix
	v4, v6 := netip.MustParseAddr("198.19.255.254"), netip.MustParseAddr("fd01:ffff::2")
	inside := []netip.Prefix{p("198.18.4.0/24"), p("fd01::/64"), p("10.224.0.0/16"), p("198.18.4.9/24")}
	both := natSetup(v4, v6, inside)
	for _, want := range []string{
		"ip daddr vmap @vips4", "ip6 daddr vmap @vips6",
		"ct mark 0x00f50000 ip saddr { 10.224.0.0/16, 198.18.4.0/24 } snat ip to 198.19.255.254",
		"ct mark 0x00f50000 ip6 saddr { fd01::/64 } snat ip6 to fd01:ffff::2",
	} {
		if !strings.Contains(both, want) {
			t.Errorf("natSetup lacks %q:\n%s", want, both)
		}
	}
	if only4 := natSetup(v4, netip.Addr{}, inside); strings.Contains(only4, "ip6 to") || !strings.Contains(only4, "snat ip to 198.19.255.254") {
		t.Errorf("natSetup of an IPv4 VPC:\n%s", only4)
	}
}

func TestInside(t *testing.T) {
	p := netip.MustParsePrefix
	r := func(s string) Range { return Range{Prefix: p(s)} }
	for _, tc := range []struct {
		name string
		cfg  Config
		want []netip.Prefix
	}{
		{"subnet and the pods' range; the VIPs (the router's own) are not inside",
			Config{Subnet: r("198.18.4.0/24"), Routed: []Range{r("198.18.5.0/24"), r("10.224.0.0/16")}, Local: []Range{r("198.18.5.0/24")}},
			[]netip.Prefix{p("198.18.4.0/24"), p("10.224.0.0/16")}},
		{"dual-stack: the IPv6 subnet and ranges too",
			Config{Subnet: r("198.18.4.0/24"), Subnet6: r("fd01::/64"), Routed: []Range{r("fd01:1::/112"), r("fd01:100::/56")}, Local: []Range{r("fd01:1::/112")}},
			[]netip.Prefix{p("198.18.4.0/24"), p("fd01::/64"), p("fd01:100::/56")}},
	} {
		nw := &Network{cfg: tc.cfg}
		if got := nw.inside(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: inside = %v, want %v", tc.name, got, tc.want)
		}
	}
}
