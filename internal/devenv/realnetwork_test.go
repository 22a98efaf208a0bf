package devenv

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRealNetworkAt(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		slot                        uint32
		block, subnet, vips, uplink string
	}{
		{0, "198.18.0.0/22", "198.18.0.0/24", "198.18.1.0/24", "198.19.255.0/30"},
		{1, "198.18.4.0/22", "198.18.4.0/24", "198.18.5.0/24", "198.19.255.4/30"},
		{63, "198.18.252.0/22", "198.18.252.0/24", "198.18.253.0/24", "198.19.255.252/30"},
	} {
		n := realNetworkAt(tc.slot)
		if n.Block != p(tc.block) || n.Subnet != p(tc.subnet) || n.VIPs != p(tc.vips) || n.Uplink != p(tc.uplink) {
			t.Errorf("slot %d: %+v, want %s %s %s %s", tc.slot, n, tc.block, tc.subnet, tc.vips, tc.uplink)
		}
		for _, inner := range []netip.Prefix{n.Subnet, n.VIPs} {
			if !n.Block.Contains(inner.Addr()) || inner.Bits() < n.Block.Bits() {
				t.Errorf("slot %d: %s is outside its block %s", tc.slot, inner, n.Block)
			}
		}
		// The host's uplink address is outside the nodes' /16: the e2e
		// suite takes a client inside it for a node, its source NATed.
		if p("198.18.0.0/16").Contains(n.Uplink.Addr()) || n.Block.Overlaps(n.Uplink) {
			t.Errorf("slot %d: uplink %s inside the nodes' /16", tc.slot, n.Uplink)
		}
		if n.Subnet.Overlaps(n.VIPs) || n.Subnet.Overlaps(n.Uplink) || n.VIPs.Overlaps(n.Uplink) {
			t.Errorf("slot %d: ranges overlap: %+v", tc.slot, n)
		}
		if !p("198.18.0.0/15").Contains(n.Block.Addr()) {
			t.Errorf("slot %d: %s is outside 198.18.0.0/15", tc.slot, n.Block)
		}
		if g := n.gateway(); g != n.Subnet.Addr().Next() {
			t.Errorf("slot %d: gateway %s", tc.slot, g)
		}
	}
}

// TestRealCloudArgs: every range the VPC routes is covered, the cluster's
// ranges included, and kube-apiserver is served at the gateway.
func TestRealCloudArgs(t *testing.T) {
	n := realNetworkAt(5)
	n.Pods, n.Services = netip.MustParsePrefix("10.230.0.0/16"), netip.MustParsePrefix("10.97.0.0/16")
	args := strings.Join(n.cloudArgs("127.0.0.1:6443"), " ")
	for _, want := range []string{
		"--machines=real", "--node-pool=" + n.Subnet.String(), "--vpc-uplink=" + n.Uplink.String(),
		"--vip-pool=" + n.VIPs.String(), "--vpc-local=" + n.VIPs.String(), "--vpc-route=" + n.VIPs.String(),
		"--vpc-route=10.230.0.0/16", "--vpc-cover=" + n.Block.String(), "--vpc-cover=" + n.Uplink.String(), "--vpc-cover=10.230.0.0/16", "--vpc-cover=10.97.0.0/16",
		"--vpc-expose=6443=127.0.0.1:6443", "--registry-public-prefix=pause", "--registry-public-prefix=e2e-test-images/",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("cloud args lack %s: %s", want, args)
		}
	}
}

func TestSubnets(t *testing.T) {
	p := netip.MustParsePrefix
	pods := subnets(p("10.224.0.0/11"), 16)
	if len(pods) != 32 || pods[0] != p("10.224.0.0/16") || pods[20] != p("10.244.0.0/16") || pods[31] != p("10.255.0.0/16") {
		t.Errorf("subnets(10.224.0.0/11, 16) = %v", pods)
	}
	svcs := subnets(p("10.96.0.0/12"), 16)
	if len(svcs) != 16 || svcs[0] != p("10.96.0.0/16") || svcs[15] != p("10.111.0.0/16") {
		t.Errorf("subnets(10.96.0.0/12, 16) = %v", svcs)
	}
	// Neither pool meets the ranges tests' VPCs take (vpctest: 10.208.0.0/12).
	if p("10.224.0.0/11").Overlaps(p("10.208.0.0/12")) || p("10.96.0.0/12").Overlaps(p("10.208.0.0/12")) {
		t.Error("a pool overlaps vpctest's range")
	}
}
