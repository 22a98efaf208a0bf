package cloud

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/portside-io/portside/internal/nettest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/cloud/upstream"
	lapi "github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// TestReverseAdapterServesUpstreamInterfaces drives the local provider
// through upstream's cloudprovider.Interface, as upstream controllers do.
func TestReverseAdapterServesUpstreamInterfaces(t *testing.T) {
	lc, p := newProvider(t)
	ctx := context.Background()
	up := upstream.ToUpstream(p)
	if up.ProviderName() != local.ProviderName || !up.HasClusterID() {
		t.Fatalf("identity: %s %v", up.ProviderName(), up.HasClusterID())
	}
	if _, ok := up.Instances(); ok {
		t.Fatal("the adapter offers InstancesV2 only")
	}
	if _, ok := up.Zones(); ok {
		t.Fatal("the adapter offers no deprecated Zones")
	}
	nodes, port := twoNodes(t, lc)

	// InstancesV2, as the upstream cloud-node controller calls it.
	v2, ok := up.InstancesV2()
	if !ok {
		t.Fatal("InstancesV2 missing")
	}
	fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	md, err := v2.InstanceMetadata(ctx, fresh)
	if err != nil || md.ProviderID != nodes[0].Spec.ProviderID || md.Zone != "zone-a" || md.Region != "region-1" || md.InstanceType != "small" {
		t.Fatalf("metadata = %+v %v", md, err)
	}
	if _, err := v2.InstanceMetadata(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}}); err != cloudprovider.InstanceNotFound {
		t.Fatalf("upstream compares with ==: want exactly InstanceNotFound, got %v", err)
	}
	if ok, err := v2.InstanceExists(ctx, nodes[1]); !ok || err != nil {
		t.Fatalf("exists = %v %v", ok, err)
	}

	// LoadBalancer, as the upstream service controller calls it.
	lb, ok := up.LoadBalancer()
	if !ok {
		t.Fatal("LoadBalancer missing")
	}
	svc := lbService(port)
	if name := lb.GetLoadBalancerName(ctx, "c1", svc); name != cloudprovider.DefaultLoadBalancerName(svc) {
		t.Fatalf("name %q differs from upstream's default %q", name, cloudprovider.DefaultLoadBalancerName(svc))
	}
	st, err := lb.EnsureLoadBalancer(ctx, "c1", svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := nettest.AskName(net.JoinHostPort(st.Ingress[0].IP, "8080")); err != nil || (name != "node-a" && name != "node-b") {
		t.Fatalf("traffic through the VIP: %q %v", name, err)
	}
	if err := lb.UpdateLoadBalancer(ctx, "c1", svc, nodes[:1]); err != nil {
		t.Fatal(err)
	}
	if name, err := nettest.AskName(net.JoinHostPort(st.Ingress[0].IP, "8080")); err != nil || name != "node-a" {
		t.Fatalf("after update: %q %v", name, err)
	}
	// Throttling reaches upstream as its RetryError.
	_ = lc.Client.SetFaults(ctx, lapi.Faults{Rules: []lapi.FaultRule{{Method: "PUT", PathPrefix: "/v1/load-balancers", ThrottleRate: 1, RetryAfterSeconds: 4}}})
	_, err = lb.EnsureLoadBalancer(ctx, "c1", svc, nodes)
	var re *api.RetryError
	if !errors.As(err, &re) || re.RetryAfter().Seconds() != 4 {
		t.Fatalf("want api.RetryError of 4s, got %v", err)
	}
	_ = lc.Client.SetFaults(ctx, lapi.Faults{})
	// An invalid Service is reported, not half-applied.
	bad := svc.DeepCopy()
	bad.Spec.LoadBalancerSourceRanges = []string{"not-a-cidr"}
	if _, err := lb.EnsureLoadBalancer(ctx, "c1", bad, nodes); err == nil {
		t.Fatal("invalid source range accepted")
	}
	// Delete works even for a Service that is no longer valid.
	if err := lb.EnsureLoadBalancerDeleted(ctx, "c1", bad); err != nil {
		t.Fatal(err)
	}
	if _, exists, err := lb.GetLoadBalancer(ctx, "c1", svc); exists || err != nil {
		t.Fatalf("after delete: %v %v", exists, err)
	}

	// Routes.
	routes, ok := up.Routes()
	if !ok {
		t.Fatal("Routes missing")
	}
	if err := routes.CreateRoute(ctx, "c1", "uid-a", &cloudprovider.Route{TargetNode: "node-a", DestinationCIDR: "10.244.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	list, err := routes.ListRoutes(ctx, "c1")
	if err != nil || len(list) != 1 || list[0].DestinationCIDR != "10.244.0.0/24" || list[0].TargetNode != "node-a" {
		t.Fatalf("routes = %+v %v", list, err)
	}
	if err := routes.DeleteRoute(ctx, "c1", list[0]); err != nil {
		t.Fatal(err)
	}
	if err := routes.CreateRoute(ctx, "c1", "uid-a", &cloudprovider.Route{TargetNode: "node-a", DestinationCIDR: "bogus"}); err == nil {
		t.Fatal("bad CIDR accepted")
	}

	// PVLabeler.
	labeler, ok := up.(cloudprovider.PVLabeler)
	if !ok {
		t.Fatal("the adapter of a provider with volumes must be a PVLabeler")
	}
	vol, _ := lc.Client.CreateVolume(ctx, lapi.CreateVolumeRequest{Name: "v", Zones: []string{"zone-a", "zone-b"}, SizeGiB: 1})
	pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		CSI: &corev1.CSIPersistentVolumeSource{Driver: local.CSIDriver, VolumeHandle: vol.ID}}}}
	labels, err := labeler.GetLabelsForVolume(ctx, pv)
	if err != nil || labels[corev1.LabelTopologyZone] != "zone-a__zone-b" || labels[corev1.LabelTopologyRegion] != "region-1" {
		t.Fatalf("labels = %v %v", labels, err)
	}

	// And back again: upstream → Portside keeps the semantics.
	round := upstream.FromUpstream(up)
	inst, _ := round.Instances()
	if _, err := inst.InstanceMetadata(ctx, cloud.Node{Name: "ghost"}); !cloud.IsNotFound(err) {
		t.Fatalf("round trip NotFound: %v", err)
	}
}
