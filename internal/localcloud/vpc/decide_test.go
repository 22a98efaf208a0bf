package vpc

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckRanges(t *testing.T) {
	p := netip.MustParsePrefix
	eth0 := HostNet{Prefix: p("192.0.2.0/24"), Dev: "eth0", Kind: "address"}
	eth0v6 := HostNet{Prefix: p("fd00::/64"), Dev: "eth0", Kind: "route"}
	def := HostNet{Prefix: p("0.0.0.0/0"), Dev: "eth0", Kind: "route"}
	for _, tc := range []struct {
		name    string
		ranges  []Range
		host    []HostNet
		own     []string
		wantErr string
	}{
		{"apart from the host", []Range{{p("198.18.0.0/16"), "--vpc-cidr"}, {p("10.244.0.0/16"), "--cluster-cidr"}}, []HostNet{eth0, eth0v6, def}, nil, ""},
		{"the default route is no overlap", []Range{{p("198.18.0.0/16"), "--vpc-cidr"}}, []HostNet{def}, nil, ""},
		{"overlaps the machine's own network", []Range{{p("192.0.0.0/16"), "--vpc-cidr"}}, []HostNet{eth0}, nil,
			"--vpc-cidr 192.0.0.0/16 overlaps the host's address 192.0.2.0/24 on eth0: choose another range with --vpc-cidr"},
		{"inside the machine's own network", []Range{{p("192.0.2.128/25"), "--vpc-cidr"}}, []HostNet{eth0}, nil, "overlaps the host's address 192.0.2.0/24"},
		{"IPv6 ULA of the machine", []Range{{p("fd00::/48"), "--vpc-cidr-v6"}}, []HostNet{eth0v6}, nil, "overlaps the host's route fd00::/64 on eth0"},
		{"another route on the host", []Range{{p("10.96.0.0/16"), "--service-cidr"}}, []HostNet{{p("10.96.5.0/24"), "docker0", "route"}}, nil, "on docker0"},
		{"our own leftovers are not the host's", []Range{{p("198.18.0.0/16"), "--vpc-cidr"}}, []HostNet{{p("198.18.0.0/16"), "unreachable", "route"}, {p("198.18.255.252/30"), "psabcdefup", "address"}},
			[]string{"psabcdefup", "unreachable"}, ""},
		{"ranges overlap each other", []Range{{p("10.0.0.0/8"), "--cluster-cidr"}, {p("10.96.0.0/16"), "--service-cidr"}}, nil, nil,
			"--cluster-cidr 10.0.0.0/8 overlaps --service-cidr 10.96.0.0/16: give them ranges apart"},
		{"not a network address", []Range{{p("198.18.0.1/16"), "--vpc-cidr"}}, nil, nil, "not a network address (did you mean 198.18.0.0/16?)"},
		{"missing", []Range{{netip.Prefix{}, "--vpc-cidr"}}, nil, nil, "--vpc-cidr: no valid address range given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRanges(tc.ranges, tc.host, tc.own)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCoveredBy(t *testing.T) {
	p := netip.MustParsePrefix
	outer := []Range{{p("198.18.0.0/16"), "a"}, {p("10.244.0.0/16"), "b"}}
	for _, tc := range []struct {
		inner []netip.Prefix
		ok    bool
		miss  string
	}{
		{[]netip.Prefix{p("198.18.0.0/24"), p("198.18.255.252/30"), p("10.244.0.0/16")}, true, ""},
		{[]netip.Prefix{p("198.18.0.0/24"), p("10.245.0.0/24")}, false, "10.245.0.0/24"},
		{[]netip.Prefix{p("198.0.0.0/8")}, false, "198.0.0.0/8"}, // wider than what covers it
	} {
		miss, ok := coveredBy(tc.inner, outer)
		if ok != tc.ok || (!ok && miss.String() != tc.miss) {
			t.Errorf("coveredBy(%v) = %v, %v; want %v, %s", tc.inner, miss, ok, tc.ok, tc.miss)
		}
	}
}

func TestUplinkAddrs(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		in, host, router, err string
	}{
		{"198.18.255.252/30", "198.18.255.253", "198.18.255.254", ""},
		{"198.18.255.254/31", "198.18.255.254", "198.18.255.255", ""},
		{"198.18.255.248/29", "198.18.255.249", "198.18.255.250", ""},
		{"198.18.255.0/24", "", "", "want an IPv4 /29, /30 or /31"},
		{"fd01::/126", "", "", "want an IPv4"},
	} {
		h, r, err := uplinkAddrs(p(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || h.String() != tc.host || r.String() != tc.router {
			t.Errorf("%s: %v %v %v, want %s %s", tc.in, h, r, err, tc.host, tc.router)
		}
	}
}

func TestNames(t *testing.T) {
	n, err := namesFor(IDFor("/var/lib/portside"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{n.bridge, n.hostUplink, n.routerUplink, machineLink("abcdef", 99)} {
		if len(name) > 15 {
			t.Errorf("link name %q is longer than the kernel's 15 bytes", name)
		}
	}
	if IDFor("/a") == IDFor("/b") {
		t.Error("two owners share an ID")
	}
	for _, bad := range []string{"", "ABCDEF", "abc", "abcdefg", "ab-def"} {
		if _, err := namesFor(bad); err == nil {
			t.Errorf("namesFor(%q) accepted", bad)
		}
	}
}

func TestUplinkAddrs6(t *testing.T) {
	p := netip.MustParsePrefix
	sub := Range{p("fd12:3456:789a::/64"), "--vpc-subnet6"}
	for _, tc := range []struct {
		name         string
		subnet, up   Range
		host, router string
		wantErr      string
	}{
		{"a /126 uplink", sub, Range{p("fd12:3456:789a:ffff::/126"), "--vpc-uplink6"}, "fd12:3456:789a:ffff::1", "fd12:3456:789a:ffff::2", ""},
		{"a /64 uplink", sub, Range{p("fd12:3456:789a:fffe::/64"), "--vpc-uplink6"}, "fd12:3456:789a:fffe::1", "fd12:3456:789a:fffe::2", ""},
		{"no uplink", sub, Range{Flag: "--vpc-uplink6"}, "", "", "--vpc-uplink6 invalid Prefix: a dual-stack VPC needs an IPv6 subnet and an IPv6 uplink"},
		{"no subnet", Range{Flag: "--vpc-subnet6"}, Range{p("fd12:3456:789a:ffff::/126"), "--vpc-uplink6"}, "", "", "--vpc-subnet6 invalid Prefix"},
		{"an IPv4 uplink", sub, Range{p("198.18.3.252/30"), "--vpc-uplink6"}, "", "", "needs an IPv6 subnet and an IPv6 uplink"},
		{"an IPv4-mapped subnet", Range{p("::ffff:198.18.0.0/120"), "--vpc-subnet6"}, Range{p("fd12:3456:789a:ffff::/126"), "--vpc-uplink6"}, "", "", "needs an IPv6 subnet"},
		{"a subnet too large", Range{p("fd12:3456:789a::/48"), "--vpc-subnet6"}, Range{p("fd12:3456:789a:ffff::/126"), "--vpc-uplink6"}, "", "", "want an IPv6 /64 to /120"},
		{"an uplink too small", sub, Range{p("fd12:3456:789a:ffff::/127"), "--vpc-uplink6"}, "", "", "want an IPv6 /64 to /126"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, r, err := uplinkAddrs6(tc.subnet, tc.up)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || h.String() != tc.host || r.String() != tc.router {
				t.Errorf("= %v, %v, %v; want %s, %s", h, r, err, tc.host, tc.router)
			}
		})
	}
}
