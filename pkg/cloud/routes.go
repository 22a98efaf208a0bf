package cloud

import (
	"context"
	"net/netip"
)

// Route sends a node's pod CIDR to that node.
type Route struct {
	// Name is the cloud's name of the route.
	Name string
	// TargetNode is the node's name.
	TargetNode string
	// DestinationCIDR is the pod CIDR (IPv4 or IPv6).
	DestinationCIDR netip.Prefix
	// Blackhole is true when the route's target no longer exists.
	Blackhole bool
}

// Routes manages the routes of a cluster's pod network.
type Routes interface {
	// ListRoutes lists the routes of cluster.
	ListRoutes(ctx context.Context, cluster string) ([]Route, error)
	// CreateRoute creates a route; nameHint is unique per node (its UID).
	CreateRoute(ctx context.Context, cluster, nameHint string, route Route) error
	// DeleteRoute deletes a route; deleting a missing route succeeds.
	DeleteRoute(ctx context.Context, cluster string, route Route) error
}
