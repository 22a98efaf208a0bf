package cloud

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// TargetNodeAddresses are the node's addresses when the route was made,
	// for providers that route to addresses rather than to an instance.
	TargetNodeAddresses []corev1.NodeAddress
	// EnableNodeAddresses, set by a provider on listed routes, says it keeps
	// TargetNodeAddresses: a route whose addresses differ from the node's
	// is then replaced.
	EnableNodeAddresses bool
	// ClusterUID is the UID of the cluster that made the route (its
	// kube-system namespace's): given to CreateRoute when the controller
	// knows it, and set on listed routes by a provider that records it (a
	// tag). A listed route with another cluster's UID is never touched,
	// even under the same cluster name; an empty one (a provider without
	// tags, a route from before them) falls back to upstream's rule, the
	// cluster name and the cluster CIDRs.
	ClusterUID types.UID
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
