package upstream

import (
	"context"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/portside-io/portside/pkg/cloud"
)

// routes adapts upstream Routes. Like upstream's route controller, it
// ignores a listed route whose destination does not parse rather than fail
// the whole reconciliation (RouteController.isResponsibleForRoute), and it
// deletes a route by handing back the very route ListRoutes returned
// (RouteController.reconcile), so a provider that matches on its own
// spelling of the CIDR finds it.
type routes struct {
	r cloudprovider.Routes

	mu     sync.Mutex
	listed map[routeKey]*cloudprovider.Route // of the last ListRoutes
}

type routeKey struct {
	name, target string
	cidr         netip.Prefix
}

func keyOf(rt cloud.Route) routeKey {
	return routeKey{name: rt.Name, target: rt.TargetNode, cidr: rt.DestinationCIDR}
}

func (r *routes) ListRoutes(ctx context.Context, cluster string) ([]cloud.Route, error) {
	list, err := r.r.ListRoutes(ctx, cluster)
	if err != nil {
		return nil, fromUpstreamErr(err)
	}
	out := make([]cloud.Route, 0, len(list))
	listed := make(map[routeKey]*cloudprovider.Route, len(list))
	for _, up := range list {
		if up == nil {
			continue
		}
		p, err := parseRouteCIDR(up.DestinationCIDR)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Ignoring a cloud route whose destination is not a CIDR",
				"route", up.Name, "targetNode", up.TargetNode, "destinationCIDR", up.DestinationCIDR)
			continue
		}
		rt := cloud.Route{Name: up.Name, TargetNode: string(up.TargetNode), DestinationCIDR: p, Blackhole: up.Blackhole,
			TargetNodeAddresses: up.TargetNodeAddresses, EnableNodeAddresses: up.EnableNodeAddresses}
		out = append(out, rt)
		listed[keyOf(rt)] = up
	}
	r.mu.Lock()
	r.listed = listed
	r.mu.Unlock()
	return out, nil
}

// parseRouteCIDR parses a destination as upstream's route controller does
// (netutils.ParseCIDRSloppy, which also takes leading zeros), keeping host
// bits when the strict parse can: "10.244.1.5/24" is not "10.244.1.0/24",
// exactly as upstream compares them (as strings).
func parseRouteCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	_, n, err := netutils.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	addr, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addr.Unmap(), ones), nil
}

// CreateRoute passes what upstream's route controller passes: the node's
// UID as name hint (the caller's) and a Route with TargetNode,
// TargetNodeAddresses and DestinationCIDR.
func (r *routes) CreateRoute(ctx context.Context, cluster, nameHint string, rt cloud.Route) error {
	return fromUpstreamErr(r.r.CreateRoute(ctx, cluster, nameHint, upstreamRoute(rt)))
}

func (r *routes) DeleteRoute(ctx context.Context, cluster string, rt cloud.Route) error {
	r.mu.Lock()
	up, ok := r.listed[keyOf(rt)]
	r.mu.Unlock()
	if !ok {
		up = upstreamRoute(rt)
	}
	return fromUpstreamErr(r.r.DeleteRoute(ctx, cluster, up))
}

func upstreamRoute(rt cloud.Route) *cloudprovider.Route {
	return &cloudprovider.Route{Name: rt.Name, TargetNode: types.NodeName(rt.TargetNode), DestinationCIDR: rt.DestinationCIDR.String(), Blackhole: rt.Blackhole,
		TargetNodeAddresses: rt.TargetNodeAddresses, EnableNodeAddresses: rt.EnableNodeAddresses}
}
