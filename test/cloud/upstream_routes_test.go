package cloud

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	routecontroller "k8s.io/cloud-provider/controllers/route"
	_ "k8s.io/controller-manager/pkg/features/register" // the gates upstream's route controller reads

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/cloud/upstream"
)

// routedNode is a Node with pod CIDRs (dual-stack when given two).
func routedNode(name string, podCIDRs ...string) *corev1.Node {
	n := readyNode(name, "v2://i-"+name)
	n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs[0], podCIDRs
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1" + name[len(name)-1:]}, {Type: corev1.NodeHostName, Address: name}}
	return n
}

// cloudRoutes are in the cloud before either controller runs: one for a
// Node that is gone (both delete it) and one whose destination does not
// parse (both ignore it, and go on).
func cloudRoutes() map[string]cloudprovider.Route {
	return map[string]cloudprovider.Route{
		"stale": {Name: "stale", TargetNode: "node-z", DestinationCIDR: "10.244.9.0/24"},
		"bad":   {Name: "bad", TargetNode: "node-y", DestinationCIDR: "10.244.300.0/24"},
	}
}

// routeCalls sorts a provider's route calls: upstream makes them in parallel.
func routeCalls(calls []call) []call {
	var out []call
	for _, c := range calls {
		if c.Method == "CreateRoute" || c.Method == "DeleteRoute" {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b call) int {
		return cmp.Or(cmp.Compare(a.Method, b.Method), cmp.Compare(a.Route.DestinationCIDR, b.Route.DestinationCIDR))
	})
	return out
}

// TestUpstreamParityRoutes reconciles the same Nodes and cloud routes by
// upstream's RouteController.reconcile and through the adapter as Portside's
// route controller calls it (internal/controllers/route sync.go:
// CreateRoute(cluster, string(node.UID), Route{TargetNode,
// DestinationCIDR, TargetNodeAddresses}); DeleteRoute with the listed
// route). The provider must get the same CreateRoute arguments (cluster,
// name hint, route) and the same DeleteRoute route, and one unparsable
// cloud route must stop neither.
func TestUpstreamParityRoutes(t *testing.T) {
	c := newCluster(t, routedNode("node-a", "10.244.1.0/24", "fd00:10:244:1::/64"), routedNode("node-b", "10.244.2.0/24"))

	viaAdapter := newV2Cloud(inventory())
	viaAdapter.routes = cloudRoutes()
	r, _ := upstream.FromUpstream(viaAdapter).Routes()
	listed, err := r.ListRoutes(c.ctx, clusterName)
	if err != nil {
		t.Fatalf("one unparsable route must not stop the list: %v", err)
	}
	for _, rt := range listed {
		if rt.TargetNode == "node-z" {
			if err := r.DeleteRoute(c.ctx, clusterName, rt); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range c.nodes(t) {
		for _, cidr := range n.Spec.PodCIDRs {
			rt := cloud.Route{TargetNode: n.Name, DestinationCIDR: netip.MustParsePrefix(cidr), TargetNodeAddresses: n.Status.Addresses}
			if err := r.CreateRoute(c.ctx, clusterName, string(n.UID), rt); err != nil {
				t.Fatal(err)
			}
		}
	}

	viaUpstream := newV2Cloud(inventory())
	viaUpstream.routes = cloudRoutes()
	_, v4, _ := net.ParseCIDR("10.244.0.0/16")
	_, v6, _ := net.ParseCIDR("fd00:10:244::/56")
	rc, err := routecontroller.New(viaUpstream, c.client, c.factory.Core().V1().Nodes(), clusterName, []*net.IPNet{v4, v6})
	if err != nil {
		t.Fatal(err)
	}
	go rc.Run(c.ctx, time.Hour, c.metrics)
	want := routeCalls(viaAdapter.Calls())
	if len(want) != 4 {
		t.Fatalf("adapter calls = %+v, want 3 creates and 1 delete", want)
	}
	eventually(t, "upstream to reconcile the routes", func() bool { return len(routeCalls(viaUpstream.Calls())) >= len(want) })
	sameCalls(t, routeCalls(viaUpstream.Calls()), want)
}
