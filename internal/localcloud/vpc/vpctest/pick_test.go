package vpctest

import (
	"net/netip"
	"testing"
)

// TestPickAvoidsUpsUplinks: no picked block holds 198.19.255.0/24, where
// real-node `up`s put their uplinks, or is in 198.18.0.0/16, where they put
// their VPCs; every block is inside 198.18.0.0/15.
func TestPickAvoidsUpsUplinks(t *testing.T) {
	uplinks := netip.MustParsePrefix("198.19.255.0/24")
	bench := netip.MustParsePrefix("198.18.0.0/15")
	for range 5000 {
		r := Pick()
		if r.Block.Overlaps(uplinks) || r.Block.Overlaps(netip.MustParsePrefix("198.18.0.0/16")) || !bench.Contains(r.Block.Addr()) {
			t.Fatalf("Pick() block %s: overlaps %s or is outside %s", r.Block, uplinks, bench)
		}
	}
}
