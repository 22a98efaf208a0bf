package realnode

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSetAddresses(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd12::2")
	for _, tc := range []struct {
		name         string
		ipv6Only     bool
		v4, v6       netip.Addr
		nodeIP, ip6  string
		validateErrs string
	}{
		{"IPv4 VPC", false, v4, netip.Addr{}, "198.18.0.2", "", ""},
		{"dual-stack", false, v4, v6, "198.18.0.2", "fd12::2", ""},
		{"IPv6-only cluster", true, v4, v6, "fd12::2", "", ""},
		{"IPv6-only without an IPv6 address", true, v4, netip.Addr{}, "198.18.0.2", "", "ipv6Only: nodeIP \"198.18.0.2\" is not an IPv6 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := BootConfig{IPv6Only: tc.ipv6Only}
			c.SetAddresses(tc.v4, tc.v6)
			if c.NodeIP != tc.nodeIP || c.NodeIP6 != tc.ip6 {
				t.Errorf("NodeIP %q, NodeIP6 %q; want %q, %q", c.NodeIP, c.NodeIP6, tc.nodeIP, tc.ip6)
			}
			err := c.Validate()
			if tc.validateErrs != "" && (err == nil || !strings.Contains(err.Error(), tc.validateErrs)) {
				t.Errorf("Validate: %v, want %q", err, tc.validateErrs)
			}
		})
	}
}
