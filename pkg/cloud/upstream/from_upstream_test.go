package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/fake"

	"github.com/portside-io/portside/pkg/cloud"
)

var addrs = []corev1.NodeAddress{
	{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
	{Type: corev1.NodeInternalIP, Address: "fd00::5"},
	{Type: corev1.NodeHostName, Address: "node-a"},
}

func TestFromUpstreamInstancesV2(t *testing.T) {
	f := &fake.Cloud{
		EnableInstancesV2: true, Provider: "fake",
		ProviderID:         map[types.NodeName]string{"node-a": "fake://i-a"},
		InstanceTypes:      map[types.NodeName]string{"fake://i-a": "m.large"},
		Addresses:          addrs,
		Zone:               cloudprovider.Zone{FailureDomain: "zone-1", Region: "region-1"},
		AdditionalLabels:   map[string]string{"example.com/rack": "r1"},
		ExistsByProviderID: true,
	}
	p := FromUpstream(f)
	if p.ProviderName() != "fake" {
		t.Fatal(p.ProviderName())
	}
	inst, ok := p.Instances()
	if !ok {
		t.Fatal("instances missing")
	}
	md, err := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "node-a", ProviderID: "fake://i-a"})
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "fake://i-a" || md.InstanceType != "m.large" || md.Zone != "zone-1" || md.Region != "region-1" ||
		len(md.Addresses) != 3 || md.AdditionalLabels["example.com/rack"] != "r1" {
		t.Fatalf("metadata = %+v", md)
	}
	if ok, err := inst.InstanceExists(context.Background(), cloud.Node{Name: "node-a"}); !ok || err != nil {
		t.Fatalf("exists = %v %v", ok, err)
	}
	f.NodeShutdown = true
	if down, err := inst.InstanceShutdown(context.Background(), cloud.Node{Name: "node-a", ProviderID: "fake://i-a"}); !down || err != nil {
		t.Fatalf("shutdown = %v %v", down, err)
	}
	f.MetadataErr = cloudprovider.InstanceNotFound
	if _, err := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "gone"}); !cloud.IsNotFound(err) || !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("InstanceNotFound must map to ErrNotFound and keep the original: %v", err)
	}
	if want := []string{"instance-metadata-by-provider-id", "instance-exists", "instance-shutdown", "instance-metadata-by-provider-id"}; fmt.Sprint(f.Calls) != fmt.Sprint(want) {
		t.Fatalf("upstream calls = %v, want %v", f.Calls, want)
	}
}

func TestFromUpstreamInstancesV1ComposesMetadata(t *testing.T) {
	f := &fake.Cloud{
		Provider:      "fake",
		ExtID:         map[types.NodeName]string{"node-a": "i-a"},
		ExtIDErr:      map[types.NodeName]error{"gone": cloudprovider.InstanceNotFound},
		InstanceTypes: map[types.NodeName]string{"fake://i-a": "m.small"},
		Addresses:     addrs,
		Zone:          cloudprovider.Zone{FailureDomain: "zone-2", Region: "region-2"},
	}
	inst, ok := FromUpstream(f).Instances()
	if !ok {
		t.Fatal("instances missing")
	}
	// No providerID yet: found by name through InstanceID.
	md, err := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "fake://i-a" || md.InstanceType != "m.small" || md.Zone != "zone-2" || md.Region != "region-2" {
		t.Fatalf("metadata = %+v", md)
	}
	// A node without providerID whose instance is gone does not exist (upstream
	// leaves such nodes forever: cloud-provider-aws#1471).
	if ok, err := inst.InstanceExists(context.Background(), cloud.Node{Name: "gone"}); ok || err != nil {
		t.Fatalf("exists(gone) = %v %v, want false nil", ok, err)
	}
	// A failing cloud is an error, never "does not exist".
	f.ErrByProviderID = errors.New("cloud API timeout")
	if ok, err := inst.InstanceExists(context.Background(), cloud.Node{Name: "node-a", ProviderID: "fake://i-a"}); ok || err == nil {
		t.Fatalf("exists with failing cloud = %v %v, want an error", ok, err)
	}
}

func TestFromUpstreamLoadBalancer(t *testing.T) {
	f := &fake.Cloud{Provider: "fake", ExternalIP: net.ParseIP("192.0.2.10"), Exists: true}
	lbs, ok := FromUpstream(f).LoadBalancers()
	if !ok {
		t.Fatal("load balancers missing")
	}
	if !lbs.Features().SupportsProtocol(corev1.ProtocolUDP) {
		t.Fatal("default features must include UDP")
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u-1"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}},
	}
	spec, err := cloud.SpecFromService("c1", svc)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []cloud.Host{{Name: "node-a", ProviderID: "fake://i-a", Addresses: addrs}, {Name: "node-b", ProviderID: "fake://i-b"}}
	st, err := lbs.EnsureLoadBalancer(context.Background(), spec, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != "192.0.2.10" || len(st.Ingress[0].Ports) != 1 {
		t.Fatalf("status = %+v", st)
	}
	if len(f.EnsureCalls) != 1 || len(f.EnsureCalls[0].Hosts) != 2 || f.EnsureCalls[0].Hosts[0].Spec.ProviderID != "fake://i-a" || f.EnsureCalls[0].Service.Name != "web" {
		t.Fatalf("ensure calls = %+v", f.EnsureCalls)
	}
	if err := lbs.UpdateLoadBalancerHosts(context.Background(), spec, hosts[:1]); err != nil {
		t.Fatal(err)
	}
	if len(f.UpdateCalls) != 1 || len(f.UpdateCalls[0].Hosts) != 1 {
		t.Fatalf("update calls = %+v", f.UpdateCalls)
	}
	if _, exists, err := lbs.GetLoadBalancer(context.Background(), spec); !exists || err != nil {
		t.Fatalf("get = %v %v", exists, err)
	}
	f.Err = api.NewRetryError("still provisioning", 7e9)
	_, err = lbs.EnsureLoadBalancer(context.Background(), spec, hosts)
	if d, ok := cloud.IsRetryAfter(err); !ok || d != 7e9 {
		t.Fatalf("RetryError must map to RetryAfterError: %v", err)
	}
	f.Err = cloudprovider.ImplementedElsewhere
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), spec); !errors.Is(err, cloud.ErrImplementedElsewhere) {
		t.Fatalf("ImplementedElsewhere must map: %v", err)
	}
	if want := []string{"create", "get-zone", "update", "create", "get-zone", "delete"}; fmt.Sprint(f.Calls) != fmt.Sprint(want) {
		t.Fatalf("calls = %v, want %v", f.Calls, want)
	}
}

func TestFromUpstreamRoutesAndVolumes(t *testing.T) {
	f := &fake.Cloud{Provider: "fake", RouteMap: map[string]*fake.Route{},
		VolumeLabelMap: map[string]map[string]string{"pv-1": {corev1.LabelTopologyZone: "z1__z2", corev1.LabelTopologyRegion: "r1"}}}
	p := FromUpstream(f)
	r, ok := p.Routes()
	if !ok {
		t.Fatal("routes missing")
	}
	ctx := context.Background()
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}
	rt := cloud.Route{TargetNode: "node-a", DestinationCIDR: netip.MustParsePrefix("10.244.1.0/24"), TargetNodeAddresses: addrs, EnableNodeAddresses: true}
	if err := r.CreateRoute(ctx, "c1", "uid-a", rt); err != nil {
		t.Fatal(err)
	}
	list, err := r.ListRoutes(ctx, "c1")
	if err != nil || len(list) != 1 || list[0].TargetNode != "node-a" || list[0].DestinationCIDR != rt.DestinationCIDR ||
		!list[0].EnableNodeAddresses || len(list[0].TargetNodeAddresses) != 1 || list[0].TargetNodeAddresses[0] != addrs[0] {
		t.Fatalf("list = %+v %v", list, err)
	}
	if err := r.DeleteRoute(ctx, "c1", list[0]); err != nil {
		t.Fatal(err)
	}
	if list, _ := r.ListRoutes(ctx, "c1"); len(list) != 0 {
		t.Fatalf("route not deleted: %+v", list)
	}
	v, ok := p.Volumes()
	if !ok {
		t.Fatal("fake cloud is a PVLabeler: volumes expected")
	}
	topo, err := v.VolumeTopology(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}})
	if err != nil || fmt.Sprint(topo.Zones) != "[z1 z2]" || topo.Region != "r1" {
		t.Fatalf("topology = %+v %v", topo, err)
	}
	f.DisableRoutes = true
	if _, ok := FromUpstream(f).Routes(); ok {
		t.Fatal("disabled routes must not be discovered")
	}
	if c := cloud.Discover(FromUpstream(f)); !c.Instances || !c.LoadBalancers || c.Routes || !c.Volumes || c.RegistryCredentials {
		t.Fatalf("Discover = %+v", c)
	}
}
