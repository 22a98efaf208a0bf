package local

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

type routes Provider

func (p *routes) ListRoutes(ctx context.Context, cluster string) ([]cloud.Route, error) {
	list, err := p.c.ListRoutes(ctx, cluster)
	if err != nil {
		return nil, sdkErr(err, "list routes")
	}
	out := make([]cloud.Route, 0, len(list))
	for _, r := range list {
		dst, err := netip.ParsePrefix(r.DestinationCIDR)
		if err != nil {
			continue // the cloud validates CIDRs; never seen
		}
		out = append(out, cloud.Route{Name: r.Name, TargetNode: r.TargetNode, DestinationCIDR: dst, Blackhole: r.Blackhole, ClusterUID: types.UID(r.ClusterUID)})
	}
	return out, nil
}

// CreateRoute names the route after nameHint (the node UID) and the address
// family, so a dual-stack node has two routes. Creating a route that
// already exists identically succeeds.
func (p *routes) CreateRoute(ctx context.Context, cluster, nameHint string, r cloud.Route) error {
	name := nameHint + "-ipv4"
	if r.DestinationCIDR.Addr().Is6() {
		name = nameHint + "-ipv6"
	}
	route := api.Route{Name: name, Cluster: cluster, ClusterUID: string(r.ClusterUID), TargetNode: r.TargetNode, DestinationCIDR: r.DestinationCIDR.String()}
	_, err := p.c.CreateRoute(ctx, route)
	if route.ClusterUID != "" && RefusesField(err, "clusterUID") {
		// A cloud older than routes' cluster UIDs (its API refuses fields
		// it does not know): the route is made as that cloud's routes all
		// are, untagged, which the route controller treats by upstream's
		// rule, as before the UID existed. So a CCM upgraded before its
		// cloud keeps routing instead of failing every route.
		klog.FromContext(ctx).Info("The local cloud does not know route cluster UIDs; route created without one (it stays untagged after the cloud is upgraded, as routes made before UIDs are): upgrade the cloud (portside cloud serve) so that new routes tell clusters of one name apart",
			"route", name, "cloud", p.c.Endpoint())
		route.ClusterUID = ""
		_, err = p.c.CreateRoute(ctx, route)
	}
	if client.IsConflict(err) {
		existing, lerr := p.ListRoutes(ctx, cluster)
		if lerr != nil {
			return lerr // e.g. throttled: its retry-after delay counts, not the conflict
		}
		for _, e := range existing {
			// A route made before routes carried the cluster UID (or by a
			// controller that did not know it) is the same route.
			sameCluster := e.ClusterUID == "" || r.ClusterUID == "" || e.ClusterUID == r.ClusterUID
			if e.Name == name && e.TargetNode == r.TargetNode && e.DestinationCIDR == r.DestinationCIDR.Masked() && !e.Blackhole && sameCluster {
				return nil
			}
		}
	}
	return sdkErr(err, "create route "+name)
}

func (p *routes) DeleteRoute(ctx context.Context, _ string, r cloud.Route) error {
	err := sdkErr(p.c.DeleteRoute(ctx, r.Name), "delete route "+r.Name)
	if cloud.IsNotFound(err) {
		return nil
	}
	return err
}

// RefusesField reports whether err is the cloud refusing a request body
// because it does not know field: what an older cloud, whose API rejects
// unknown fields, answers a newer client.
func RefusesField(err error, field string) bool {
	var se *client.StatusError
	return errors.As(err, &se) && se.Status == http.StatusBadRequest && se.Code == api.CodeInvalid &&
		strings.Contains(se.Message, `unknown field "`+field+`"`)
}
