package route

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// TestResyncDeletesOnlyOurRoutes: a resync over a cloud that has the
// cluster's routes and others deletes, through the controller's own paths,
// only the cluster's stale ones: to a node that is gone (deleteRoutesTo)
// and for a CIDR a node no longer has (PlanNode); a foreign route to a
// gone node, a default route and a wider route stay.
func TestResyncDeletesOnlyOurRoutes(t *testing.T) {
	cl := &memRoutes{routes: []cloud.Route{
		rt("keep", "n1", "10.244.1.0/24", false),
		rt("gone-node", "n9", "10.244.9.0/24", false),
		rt("gone-node-v6", "n9", "fd00:244:0:9::/64", false),
		rt("wrong-cidr", "n2", "10.244.7.0/24", false),
		rt("foreign", "n9", "172.16.0.0/24", false),
		rt("default-route", "nat", "0.0.0.0/0", false),
		rt("wider", "n9", "10.0.0.0/8", false),
	}}
	resyncAndSync(t, cl, "", podNode("n1", "10.244.1.0/24"), podNode("n2", "10.244.2.0/24"))
	var got []string
	for _, r := range cl.routes {
		got = append(got, r.TargetNode+" "+r.DestinationCIDR.String())
	}
	slices.Sort(got)
	want := []string{"n1 10.244.1.0/24", "n2 10.244.2.0/24", "n9 10.0.0.0/8", "n9 172.16.0.0/24", "nat 0.0.0.0/0"}
	if !slices.Equal(got, want) {
		t.Errorf("routes after the resync %v, want %v", got, want)
	}
}

// TestNewRefusesUnscopedConfig: without a cluster name ListRoutes is not
// scoped to this cluster, and without cluster CIDRs nothing says which
// routes are its own: either way the controller must not start.
func TestNewRefusesUnscopedConfig(t *testing.T) {
	nodes := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Nodes()
	for _, tc := range []struct {
		name, cluster string
		cidrs         []netip.Prefix
		want          string
	}{
		{"no cluster name", "", clusterCIDRs, "--cluster-name"},
		{"no cluster CIDR", "test", nil, "--cluster-cidr"},
	} {
		_, err := New(Config{Nodes: nodes, Routes: &memRoutes{}, ClusterName: tc.cluster, ClusterCIDRs: tc.cidrs})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
}

// TestOtherClusterRoutesUntouched: a cluster of the same name (another
// kube-system UID) lists into the same routes: its stale-looking route to
// one of our nodes and its route to a node we do not have stay, and the
// routes we make carry our UID. Routes without a UID (a provider without
// tags) are still judged by upstream's rule.
func TestOtherClusterRoutesUntouched(t *testing.T) {
	theirs := func(r cloud.Route) cloud.Route { r.ClusterUID = "uid-b"; return r }
	cl := &memRoutes{routes: []cloud.Route{
		theirs(rt("b-n1", "n1", "10.244.5.0/24", false)),
		theirs(rt("b-n7", "n7", "10.244.7.0/24", false)),
		rt("untagged-gone", "n9", "10.244.9.0/24", false),
	}}
	resyncAndSync(t, cl, "uid-a", podNode("n1", "10.244.1.0/24"))
	var got []string
	for _, r := range cl.routes {
		got = append(got, string(r.ClusterUID)+" "+r.TargetNode+" "+r.DestinationCIDR.String())
	}
	slices.Sort(got)
	want := []string{"uid-a n1 10.244.1.0/24", "uid-b n1 10.244.5.0/24", "uid-b n7 10.244.7.0/24"}
	if !slices.Equal(got, want) {
		t.Errorf("routes after the resync %v, want %v", got, want)
	}
}

// resyncAndSync runs a controller of cluster "test" (UID uid) with nodes
// over cl: one full resync, then every node it queued synced, as the
// workers would.
func resyncAndSync(t *testing.T, cl *memRoutes, uid types.UID, nodeObjs ...*corev1.Node) {
	t.Helper()
	ctx := context.Background()
	client := fake.NewClientset()
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	c, err := New(Config{
		Client: client, Nodes: nodes, Routes: cl, Recorder: record.NewFakeRecorder(100),
		ClusterName: "test", ClusterUID: uid, ClusterCIDRs: clusterCIDRs, Workers: 1, StatusWorkers: 1, ResyncPeriod: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodeObjs {
		if err := nodes.Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.resync(ctx); err != nil {
		t.Fatal(err)
	}
	for c.routes.Len() > 0 {
		key, _ := c.routes.Get()
		if err := c.syncNode(ctx, key); err != nil {
			t.Errorf("sync %s: %v", key, err)
		}
		c.routes.Done(key)
	}
}
