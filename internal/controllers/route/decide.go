package route

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/internal/netaddr"
	"github.com/portside-io/portside/pkg/cloud"
)

// Plan is what one node needs from the cloud.
type Plan struct {
	// Create are the node's pod CIDRs that have no route to it yet.
	Create []netip.Prefix
	// Delete are routes to the node that are stale (a CIDR it no longer
	// has) or blackholed, inside the cluster CIDRs.
	Delete []cloud.Route
}

// Empty reports whether the plan makes no cloud call.
func (p Plan) Empty() bool { return len(p.Create) == 0 && len(p.Delete) == 0 }

// PlanNode decides the routes of one node from its pod CIDRs, its
// addresses and the routes that target it. Deletions come first in the
// plan's execution: a provider may name routes per node and family, so a
// stale route would block its replacement. A route of a provider that keeps
// node addresses (EnableNodeAddresses) is replaced when they changed.
func PlanNode(podCIDRs []netip.Prefix, addrs []corev1.NodeAddress, routes []cloud.Route, clusterCIDRs []netip.Prefix) Plan {
	var p Plan
	current := func(r cloud.Route) bool {
		return !r.Blackhole && slices.Contains(podCIDRs, r.DestinationCIDR.Masked()) &&
			(!r.EnableNodeAddresses || sameAddresses(r.TargetNodeAddresses, addrs))
	}
	for _, r := range routes {
		if !current(r) && Responsible(r.DestinationCIDR, clusterCIDRs) {
			p.Delete = append(p.Delete, r)
		}
	}
	for _, c := range podCIDRs {
		if !slices.ContainsFunc(routes, func(r cloud.Route) bool { return current(r) && r.DestinationCIDR.Masked() == c }) {
			p.Create = append(p.Create, c)
		}
	}
	return p
}

// sameAddresses compares address sets, ignoring order.
func sameAddresses(a, b []corev1.NodeAddress) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x corev1.NodeAddress) bool { return !slices.Contains(b, x) })
}

// Responsible reports whether a route is the cluster's, i.e. whether this
// controller may delete it: its first or last address is inside a cluster
// CIDR (upstream's rule). A wider route that merely contains the cluster
// CIDR, such as a default route to a NAT instance, is not.
func Responsible(dst netip.Prefix, clusterCIDRs []netip.Prefix) bool {
	dst = dst.Masked()
	last := netaddr.Last(dst)
	return slices.ContainsFunc(clusterCIDRs, func(c netip.Prefix) bool { return c.Contains(dst.Addr()) || c.Contains(last) })
}

// OwnedByCluster reports whether a listed route may be this cluster's by
// its cluster UID: yes when the route carries ours, or when either is
// unknown (a provider without tags, a route from before them, our UID
// unreadable), where upstream's rule (name and CIDRs) decides alone; no
// when it carries another cluster's.
func OwnedByCluster(route, ours types.UID) bool {
	return route == "" || ours == "" || route == ours
}
