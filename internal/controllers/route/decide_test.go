package route

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

var clusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}

func rt(name, node, cidr string, blackhole bool) cloud.Route {
	return cloud.Route{Name: name, TargetNode: node, DestinationCIDR: netip.MustParsePrefix(cidr), Blackhole: blackhole}
}

func TestPlanNode(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")
	cases := []struct {
		name         string
		routes       []cloud.Route
		create, dels int
	}{
		{"nothing yet: one route per family", nil, 2, 0},
		{"all there", []cloud.Route{rt("a", "n", "10.244.1.0/24", false), rt("b", "n", "fd00:244:0:1::/64", false)}, 0, 0},
		{"blackholed: replaced", []cloud.Route{rt("a", "n", "10.244.1.0/24", true), rt("b", "n", "fd00:244:0:1::/64", false)}, 1, 1},
		{"stale CIDR inside the cluster: deleted", []cloud.Route{rt("a", "n", "10.244.9.0/24", false), rt("b", "n", "fd00:244:0:1::/64", false)}, 1, 1},
		{"stale CIDR outside the cluster: left alone", []cloud.Route{rt("a", "n", "192.168.0.0/24", false), rt("b", "n", "fd00:244:0:1::/64", false)}, 1, 0},
	}
	for _, tc := range cases {
		p := PlanNode([]netip.Prefix{v4, v6}, nil, tc.routes, clusterCIDRs)
		if len(p.Create) != tc.create || len(p.Delete) != tc.dels {
			t.Errorf("%s: plan %+v, want %d creates and %d deletes", tc.name, p, tc.create, tc.dels)
		}
	}
}

func TestStaleRoutes(t *testing.T) {
	routes := []cloud.Route{
		rt("keep", "n1", "10.244.1.0/24", false),
		rt("gone-node", "n9", "10.244.9.0/24", false),
		rt("wrong-cidr", "n2", "10.244.7.0/24", false),
		rt("blackhole", "n1", "fd00:244:0:1::/64", true),
		rt("foreign", "n9", "172.16.0.0/24", false),
		rt("default-route", "nat", "0.0.0.0/0", false),
		rt("wider", "n9", "10.0.0.0/8", false),
	}
	nodes := map[string][]netip.Prefix{
		"n1": {netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")},
		"n2": {netip.MustParsePrefix("10.244.2.0/24")},
	}
	var got []string
	for _, r := range StaleRoutes(routes, nodes, clusterCIDRs) {
		got = append(got, r.Name)
	}
	want := []string{"gone-node", "wrong-cidr", "blackhole"}
	if len(got) != len(want) {
		t.Fatalf("stale %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stale %v, want %v", got, want)
		}
	}
}

func TestPlanNodeReplacesRoutesWhoseNodeAddressesChanged(t *testing.T) {
	v4 := netip.MustParsePrefix("10.244.1.0/24")
	old := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}
	now := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.11"}}
	tracked := rt("a", "n", "10.244.1.0/24", false)
	tracked.EnableNodeAddresses, tracked.TargetNodeAddresses = true, old
	if p := PlanNode([]netip.Prefix{v4}, now, []cloud.Route{tracked}, clusterCIDRs); len(p.Delete) != 1 || len(p.Create) != 1 {
		t.Fatalf("addresses changed: plan %+v, want the route replaced", p)
	}
	if p := PlanNode([]netip.Prefix{v4}, old, []cloud.Route{tracked}, clusterCIDRs); !p.Empty() {
		t.Fatalf("same addresses: plan %+v", p)
	}
	untracked := rt("a", "n", "10.244.1.0/24", false)
	untracked.TargetNodeAddresses = old // the provider does not keep them
	if p := PlanNode([]netip.Prefix{v4}, now, []cloud.Route{untracked}, clusterCIDRs); !p.Empty() {
		t.Fatalf("provider without EnableNodeAddresses: plan %+v", p)
	}
}
