package route

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// TestResponsible: which routes this controller may delete (upstream's
// rule): those starting or ending inside a cluster CIDR, never a wider or
// foreign one.
func TestResponsible(t *testing.T) {
	for _, tc := range []struct {
		dst  string
		want bool
	}{
		{"10.244.1.0/24", true},
		{"10.244.0.0/16", true},
		{"fd00:244:0:1::/64", true},
		{"10.244.1.7/24", true}, // not masked: compared masked
		{"172.16.0.0/24", false},
		{"0.0.0.0/0", false},
		{"10.0.0.0/8", false},
		{"10.243.255.0/24", false},
		{"10.245.0.0/24", false},
		{"fd00:245::/64", false},
		{"::/0", false},
	} {
		if got := Responsible(netip.MustParsePrefix(tc.dst), clusterCIDRs); got != tc.want {
			t.Errorf("Responsible(%s) = %v, want %v", tc.dst, got, tc.want)
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

func TestOwnedByCluster(t *testing.T) {
	for _, tc := range []struct {
		route, ours types.UID
		want        bool
	}{
		{"uid-a", "uid-a", true},
		{"uid-b", "uid-a", false},
		{"", "uid-a", true}, // untagged: upstream's rule decides
		{"uid-b", "", true}, // our UID unknown: upstream's rule decides
		{"", "", true},
	} {
		if got := OwnedByCluster(tc.route, tc.ours); got != tc.want {
			t.Errorf("OwnedByCluster(%q, %q) = %v, want %v", tc.route, tc.ours, got, tc.want)
		}
	}
}
