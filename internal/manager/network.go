package manager

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/portside-io/portside/internal/controllers/nodeipam"
)

// NetworkOptions are the pod-network settings of the node IPAM and route
// controllers, with upstream's flag names and defaults.
type NetworkOptions struct {
	AllocateNodeCIDRs     bool
	CIDRAllocatorType     string
	ClusterCIDR           string
	ServiceClusterIPRange string
	// NodeCIDRMaskSize is for single-stack clusters; the per-family sizes
	// default to /24 and /64. Zero means unset.
	NodeCIDRMaskSize, NodeCIDRMaskSizeIPv4, NodeCIDRMaskSizeIPv6 int

	ConfigureCloudRoutes bool
	// RouteReconciliationPeriod: upstream lists every route each 10 s;
	// Portside's route controller follows node events and only needs the
	// full list to repair routes changed behind its back, so 5 minutes.
	RouteReconciliationPeriod time.Duration
	// ConcurrentRouteSyncs bounds route calls in flight. 200 as upstream's
	// bound: some clouds take tens of seconds per route call, and a cloud
	// that wants less says so with Retry-After, honoured per node.
	ConcurrentRouteSyncs int
}

func defaultNetworkOptions() NetworkOptions {
	return NetworkOptions{
		CIDRAllocatorType:         nodeipam.RangeAllocator,
		ConfigureCloudRoutes:      true,
		RouteReconciliationPeriod: 5 * time.Minute,
		ConcurrentRouteSyncs:      200,
	}
}

func (o *NetworkOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.AllocateNodeCIDRs, "allocate-node-cidrs", o.AllocateNodeCIDRs, "give nodes pod CIDRs (node-ipam-controller) and, with --configure-cloud-routes, cloud routes to them")
	fs.StringVar(&o.CIDRAllocatorType, "cidr-allocator-type", o.CIDRAllocatorType, "where pod CIDRs come from: RangeAllocator (from --cluster-cidr) or CloudAllocator (assigned by the cloud)")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "CIDR range of pods, one or two comma-separated (dual-stack)")
	fs.StringVar(&o.ServiceClusterIPRange, "service-cluster-ip-range", o.ServiceClusterIPRange, "CIDR range(s) of Services, kept out of node pod CIDRs")
	fs.IntVar(&o.NodeCIDRMaskSize, "node-cidr-mask-size", o.NodeCIDRMaskSize, "mask size of node pod CIDRs in a single-stack cluster (default 24 for IPv4, 64 for IPv6)")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv4, "node-cidr-mask-size-ipv4", o.NodeCIDRMaskSizeIPv4, "mask size of IPv4 node pod CIDRs (default 24)")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv6, "node-cidr-mask-size-ipv6", o.NodeCIDRMaskSizeIPv6, "mask size of IPv6 node pod CIDRs (default 64)")
	fs.BoolVar(&o.ConfigureCloudRoutes, "configure-cloud-routes", o.ConfigureCloudRoutes, "create cloud routes for node pod CIDRs (needs --allocate-node-cidrs and a provider with routes)")
	fs.DurationVar(&o.RouteReconciliationPeriod, "route-reconciliation-period", o.RouteReconciliationPeriod, "how often all cloud routes are listed and repaired (upstream: 10s; Portside follows node events between)")
	fs.IntVar(&o.ConcurrentRouteSyncs, "concurrent-route-syncs", o.ConcurrentRouteSyncs, "route calls in flight at once")
}

// Network is the parsed pod-network configuration.
type Network struct {
	ClusterCIDRs  []netip.Prefix
	NodeMaskSizes []int // one per cluster CIDR
	ServiceCIDRs  []netip.Prefix
}

// network parses and checks the settings; errors name the flag to fix.
func (o *NetworkOptions) network() (Network, error) {
	var n Network
	if !o.AllocateNodeCIDRs && !o.ConfigureCloudRoutes {
		return n, nil
	}
	var err error
	if n.ClusterCIDRs, err = parseFamilies("--cluster-cidr", o.ClusterCIDR); err != nil {
		return n, err
	}
	if o.ConfigureCloudRoutes && (o.RouteReconciliationPeriod <= 0 || o.ConcurrentRouteSyncs < 1) {
		return n, errors.New("--route-reconciliation-period must be positive and --concurrent-route-syncs at least 1")
	}
	if !o.AllocateNodeCIDRs {
		// Routes alone (upstream's default): pod CIDRs come from
		// kube-controller-manager's node IPAM.
		return n, nil
	}
	if o.CIDRAllocatorType != nodeipam.RangeAllocator && o.CIDRAllocatorType != nodeipam.CloudAllocator {
		return n, fmt.Errorf("--cidr-allocator-type=%s is not supported: use %s or %s", o.CIDRAllocatorType, nodeipam.RangeAllocator, nodeipam.CloudAllocator)
	}
	if len(n.ClusterCIDRs) == 0 && (o.CIDRAllocatorType == nodeipam.RangeAllocator || o.ConfigureCloudRoutes) {
		return n, errors.New("--allocate-node-cidrs needs --cluster-cidr (e.g. 10.244.0.0/16) for the RangeAllocator and for cloud routes")
	}
	if n.ServiceCIDRs, err = parseFamilies("--service-cluster-ip-range", o.ServiceClusterIPRange); err != nil {
		return n, err
	}
	if n.NodeMaskSizes, err = o.maskSizes(n.ClusterCIDRs); err != nil {
		return n, err
	}
	for i, c := range n.ClusterCIDRs {
		// The allocator's own checks: the mask fits, the subnets are not too many.
		if _, err := nodeipam.NewCIDRSet(c, n.NodeMaskSizes[i]); err != nil {
			return n, err
		}
	}
	return n, nil
}

// maskSizes follows upstream: --node-cidr-mask-size only for single-stack,
// and only the flag of the cluster's family.
func (o *NetworkOptions) maskSizes(clusterCIDRs []netip.Prefix) ([]int, error) {
	v4, v6 := 24, 64
	if o.NodeCIDRMaskSizeIPv4 != 0 {
		v4 = o.NodeCIDRMaskSizeIPv4
	}
	if o.NodeCIDRMaskSizeIPv6 != 0 {
		v6 = o.NodeCIDRMaskSizeIPv6
	}
	switch {
	case len(clusterCIDRs) > 1 && o.NodeCIDRMaskSize != 0:
		return nil, errors.New("--node-cidr-mask-size is not allowed with a dual-stack --cluster-cidr: use --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6")
	case o.NodeCIDRMaskSize != 0 && (o.NodeCIDRMaskSizeIPv4 != 0 || o.NodeCIDRMaskSizeIPv6 != 0):
		return nil, errors.New("--node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 are not allowed with --node-cidr-mask-size: set one or the other")
	case o.NodeCIDRMaskSize != 0:
		v4, v6 = o.NodeCIDRMaskSize, o.NodeCIDRMaskSize
	case len(clusterCIDRs) == 1 && clusterCIDRs[0].Addr().Is6() && o.NodeCIDRMaskSizeIPv4 != 0:
		return nil, errors.New("--node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster")
	case len(clusterCIDRs) == 1 && clusterCIDRs[0].Addr().Is4() && o.NodeCIDRMaskSizeIPv6 != 0:
		return nil, errors.New("--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster")
	}
	out := make([]int, len(clusterCIDRs))
	for i, c := range clusterCIDRs {
		out[i] = v4
		if c.Addr().Is6() {
			out[i] = v6
		}
	}
	return out, nil
}

// parseFamilies parses one CIDR, or two of different families.
func parseFamilies(flag, value string) ([]netip.Prefix, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for _, s := range strings.Split(value, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR (want e.g. 10.244.0.0/16)", flag, s)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%s: %q has host bits set; did you mean %s?", flag, s, p.Masked())
		}
		out = append(out, p)
	}
	switch {
	case len(out) > 2:
		return nil, fmt.Errorf("%s: at most two CIDRs (one IPv4, one IPv6), got %d", flag, len(out))
	case len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4():
		return nil, fmt.Errorf("%s: two CIDRs must be one IPv4 and one IPv6 (dual-stack), got %s", flag, value)
	}
	return out, nil
}
