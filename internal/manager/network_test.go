package manager

import (
	"strings"
	"testing"
)

func TestNetworkOptionsValidation(t *testing.T) {
	cases := []struct {
		set   func(o *NetworkOptions)
		want  string // error substring, "" for valid
		masks []int
	}{
		{func(o *NetworkOptions) {}, "", nil}, // off by default
		{func(o *NetworkOptions) { o.AllocateNodeCIDRs = true }, "needs --cluster-cidr", nil},
		{func(o *NetworkOptions) { o.AllocateNodeCIDRs, o.ClusterCIDR = true, "10.244.0.0/16" }, "", []int{24}},
		{func(o *NetworkOptions) { o.AllocateNodeCIDRs, o.ClusterCIDR = true, "10.244.0.1/16" }, "host bits set; did you mean 10.244.0.0/16", nil},
		{func(o *NetworkOptions) { o.AllocateNodeCIDRs, o.ClusterCIDR = true, "10.244.0.0/16,10.245.0.0/16" }, "one IPv4 and one IPv6", nil},
		{func(o *NetworkOptions) { o.AllocateNodeCIDRs, o.ClusterCIDR = true, "fd00::/48,10.244.0.0/16" }, "", []int{64, 24}},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.NodeCIDRMaskSize = true, "10.244.0.0/16,fd00::/48", 24
		}, "not allowed with a dual-stack", nil},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.NodeCIDRMaskSizeIPv6 = true, "10.244.0.0/16", 64
		}, "not allowed for a single-stack IPv4 cluster", nil},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.NodeCIDRMaskSize = true, "10.244.0.0/16", 8
		}, "does not fit in cluster CIDR", nil},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.NodeCIDRMaskSize = true, "10.0.0.0/8", 26
		}, "", []int{26}},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.NodeCIDRMaskSizeIPv6 = true, "fd00::/32", 64
		}, "more than 2^16 node subnets", nil},
		{func(o *NetworkOptions) { o.AllocateNodeCIDRs, o.CIDRAllocatorType = true, "IPAMFromCloud" }, "not supported", nil},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.CIDRAllocatorType, o.ConfigureCloudRoutes = true, "CloudAllocator", false
		}, "", nil},
		{func(o *NetworkOptions) {
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.ServiceClusterIPRange = true, "10.244.0.0/16", "10.96.0.0/12,fd00:96::/112,10.1.0.0/16"
		}, "at most two", nil},
	}
	for i, tc := range cases {
		o := defaultNetworkOptions()
		tc.set(&o)
		nw, err := o.network()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("case %d: unexpected error %v", i, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("case %d: error %v, want one containing %q", i, err, tc.want)
		case tc.masks != nil && (len(nw.NodeMaskSizes) != len(tc.masks) || nw.NodeMaskSizes[0] != tc.masks[0]):
			t.Errorf("case %d: masks %v, want %v", i, nw.NodeMaskSizes, tc.masks)
		}
	}
}
