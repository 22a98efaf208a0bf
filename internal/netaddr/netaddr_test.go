package netaddr

import (
	"net/netip"
	"testing"
)

func TestLast(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.0/24":  "10.244.1.255",
		"10.244.0.0/20":  "10.244.15.255",
		"10.244.1.7/32":  "10.244.1.7",
		"0.0.0.0/0":      "255.255.255.255",
		"10.244.1.77/23": "10.244.1.255",
		"fd00:244::/64":  "fd00:244::ffff:ffff:ffff:ffff",
		"fd00:244::/60":  "fd00:244:0:f:ffff:ffff:ffff:ffff",
	} {
		if got := Last(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("Last(%s) = %s, want %s", in, got, want)
		}
	}
}
