package devenv

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckIPFamily(t *testing.T) {
	for _, tc := range []struct {
		name, family, mode, err string
	}{
		{"default", "", NodeModeSimulated, ""},
		{"ipv4", IPFamilyIPv4, NodeModeReal, ""},
		{"dual on real nodes", IPFamilyDual, NodeModeReal, ""},
		{"dual on simulated nodes", IPFamilyDual, NodeModeSimulated, "--ip-family=dual runs on real nodes"},
		{"ipv6 on real nodes", IPFamilyIPv6, NodeModeReal, ""},
		{"ipv6 on simulated nodes", IPFamilyIPv6, NodeModeSimulated, "--ip-family=ipv6 runs on real nodes"},
		{"unknown", "ipv5", NodeModeReal, `--ip-family "ipv5": want ipv4, dual or ipv6`},
	} {
		err := checkIPFamily(tc.family, tc.mode)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: checkIPFamily = %v, want an error with %q", tc.name, err, tc.err)
		}
	}
}

func TestRealNetwork6(t *testing.T) {
	n := realNetwork6(netip.MustParsePrefix("fd12:3456:789a::/48"))
	want := map[string]netip.Prefix{
		"fd12:3456:789a::/48": n.Block6, "fd12:3456:789a::/64": n.Subnet6, "fd12:3456:789a:1::/112": n.VIPs6,
		"fd12:3456:789a:100::/56": n.Pods6, "fd12:3456:789a:200::/112": n.Services6, "fd12:3456:789a:ffff::/126": n.Uplink6,
	}
	parts := []netip.Prefix{n.Subnet6, n.VIPs6, n.Pods6, n.Services6, n.Uplink6}
	for s, got := range want {
		if got.String() != s {
			t.Errorf("got %s, want %s", got, s)
		}
		if !n.Block6.Contains(got.Addr()) || got.Bits() < n.Block6.Bits() {
			t.Errorf("%s is not inside the block %s", got, n.Block6)
		}
	}
	for i, a := range parts {
		for _, b := range parts[i+1:] {
			if a.Overlaps(b) {
				t.Errorf("%s overlaps %s", a, b)
			}
		}
	}
	// The Service range fits kube-apiserver's IPv6 limit (/108 or longer).
	if n.Services6.Bits() < 108 {
		t.Errorf("Service range %s: kube-apiserver wants an IPv6 /108 or longer", n.Services6)
	}
	args := strings.Join(n.cloudArgs6(), " ")
	for _, w := range []string{"--node-pool-v6=fd12:3456:789a::/64", "--vpc-uplink6=fd12:3456:789a:ffff::/126", "--vip-pool-v6=fd12:3456:789a:1::/112",
		"--vpc-local=fd12:3456:789a:1::/112", "--vpc-route=fd12:3456:789a:100::/56", "--vpc-cover=fd12:3456:789a::/48"} {
		if !strings.Contains(args, w) {
			t.Errorf("cloud args %q lack %s", args, w)
		}
	}
	if (realNetwork{}).cloudArgs6() != nil {
		t.Errorf("an IPv4-only plan has IPv6 cloud args")
	}
}

func TestULA48(t *testing.T) {
	machine := netip.MustParsePrefix("fd00::/64")
	seen := map[netip.Prefix]bool{}
	for i := 0; i < 200; i++ {
		p := ula48("/work/main/_output/up", i)
		if p.Bits() != 48 || p.Addr().As16()[0] != 0xfd || p.Overlaps(machine) {
			t.Fatalf("candidate %d: %s, want a /48 of fd00::/8 apart from fd00::/64", i, p)
		}
		seen[p] = true
	}
	if len(seen) < 199 {
		t.Errorf("only %d distinct candidates of 200", len(seen))
	}
	if ula48("/a", 0) == ula48("/b", 0) {
		t.Errorf("two data directories got one /48")
	}
}

func TestDualList(t *testing.T) {
	v6 := netip.MustParsePrefix("fd12::/56")
	for _, tc := range []struct {
		v4   string
		v6   netip.Prefix
		dual bool
		want string
	}{
		{"10.224.0.0/16", v6, true, "10.224.0.0/16,fd12::/56"},
		{"10.224.0.0/16", v6, false, "10.224.0.0/16"},
		{"10.224.0.0/16", netip.Prefix{}, true, "10.224.0.0/16"},
	} {
		if got := dualList(tc.v4, tc.v6, tc.dual); got != tc.want {
			t.Errorf("dualList(%s, %v, %v) = %s, want %s", tc.v4, tc.v6, tc.dual, got, tc.want)
		}
	}
	if a, err := nthAddr("10.96.0.0/16,fd12:3456:789a:200::/112", 10); err != nil || a.String() != "10.96.0.10" {
		t.Errorf("nthAddr of a dual-stack list = %v, %v; want the primary family's 10.96.0.10", a, err)
	}
}
