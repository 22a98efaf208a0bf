package upstream

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"

	"github.com/portside-io/portside/pkg/cloud"
)

// nodeMap is a NodeGetter over fixed Nodes, standing in for the CCM's lister.
type nodeMap map[string]*corev1.Node

func (m nodeMap) Get(name string) (*corev1.Node, error) {
	if n, ok := m[name]; ok {
		return n, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
}

// fullNode has everything upstream's controllers hand a provider and
// cloud.Node does not carry.
func fullNode(name, providerID string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "42",
			Labels:      map[string]string{"example.com/pool": "blue"},
			Annotations: map[string]string{"alpha.kubernetes.io/provided-node-ip": "10.0.0.5", "example.com/rack": "r1"}},
		Spec: corev1.NodeSpec{ProviderID: providerID, PodCIDRs: []string{"10.244.1.0/24"},
			Taints: []corev1.Taint{{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Addresses: addrs,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", SystemUUID: "ec2-uuid", Architecture: "arm64"}},
	}
}

// InstancesV2 methods get the cluster's whole Node, as upstream's node
// controllers pass it (CloudNodeController.syncNode passes a DeepCopy of
// the lister's Node; so does CloudNodeLifecycleController.MonitorNodes).
func TestFromUpstreamInstancesV2GetsFullNode(t *testing.T) {
	node := fullNode("node-a", "")
	var got []*corev1.Node
	f := &fake.Cloud{EnableInstancesV2: true, OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
		got = append(got, n)
		return &cloudprovider.InstanceMetadata{ProviderID: "fake://i-a"}, nil
	}}
	inst, _ := FromUpstream(f, WithNodes(nodeMap{"node-a": node})).Instances()
	md, err := inst.InstanceMetadata(context.Background(), cloud.NodeFrom(node))
	if err != nil || md.ProviderID != "fake://i-a" {
		t.Fatalf("metadata = %+v, %v", md, err)
	}
	if len(got) != 1 || !apiequality.Semantic.DeepEqual(got[0], node) {
		t.Fatalf("provider got %+v, want the full node %+v", got, node)
	}
	if got[0] == node {
		t.Fatal("the provider must get a copy, as upstream's DeepCopy: it may change it")
	}
	// The caller knows a providerID the lister does not have yet: same node.
	if _, err := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "node-a", ProviderID: "fake://i-a"}); err != nil {
		t.Fatal(err)
	}
	if got[1].Spec.ProviderID != "fake://i-a" || got[1].UID != node.UID || node.Spec.ProviderID != "" {
		t.Fatalf("providerID not overlaid on a copy: %+v (lister's: %q)", got[1].Spec, node.Spec.ProviderID)
	}
	// A node the lister does not have is rebuilt from what cloud.Node has.
	if _, err := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "node-x", ProviderID: "fake://i-x"}); err != nil {
		t.Fatal(err)
	}
	if got[2].Name != "node-x" || got[2].Spec.ProviderID != "fake://i-x" {
		t.Fatalf("rebuilt node = %+v", got[2])
	}
}

// byNameOnly is a legacy provider of upstream's older kind: Instances and
// Zones that know machines by node name only; everything by providerID,
// and InstanceID, is NotImplemented.
type byNameOnly struct {
	*fake.Cloud
	zoneByName error
}

func (b byNameOnly) Instances() (cloudprovider.Instances, bool) { return b, true }
func (b byNameOnly) Zones() (cloudprovider.Zones, bool)         { return b, !b.DisableZones }
func (b byNameOnly) InstanceID(context.Context, types.NodeName) (string, error) {
	return "", cloudprovider.NotImplemented
}
func (b byNameOnly) NodeAddressesByProviderID(context.Context, string) ([]corev1.NodeAddress, error) {
	return nil, cloudprovider.NotImplemented
}
func (b byNameOnly) InstanceTypeByProviderID(context.Context, string) (string, error) {
	return "", cloudprovider.NotImplemented
}
func (b byNameOnly) GetZoneByProviderID(context.Context, string) (cloudprovider.Zone, error) {
	return cloudprovider.Zone{}, cloudprovider.NotImplemented
}
func (b byNameOnly) GetZoneByNodeName(ctx context.Context, n types.NodeName) (cloudprovider.Zone, error) {
	if b.zoneByName != nil {
		return cloudprovider.Zone{}, b.zoneByName
	}
	return b.Cloud.GetZoneByNodeName(ctx, n)
}

// As CloudNodeController.getInstanceMetadata: InstanceID NotImplemented is
// the one error upstream tolerates; the node is then found by name, and the
// SDK says so in a warning instead of silently.
func TestFromUpstreamLegacyByNodeName(t *testing.T) {
	f := &fake.Cloud{Provider: "onprem", Addresses: addrs, InstanceTypes: map[types.NodeName]string{"node-a": "metal"},
		Zone: cloudprovider.Zone{FailureDomain: "room-1", Region: "dc-1"}}
	inst, _ := FromUpstream(byNameOnly{Cloud: f}).Instances()
	md, err := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "" || md.InstanceType != "metal" || md.Zone != "room-1" || md.Region != "dc-1" || len(md.Addresses) != len(addrs) {
		t.Fatalf("metadata = %+v", md)
	}
	if len(md.Warnings) != 1 || !errors.Is(md.Warnings[0], cloud.ErrNoProviderID) || !cloud.IsNotImplemented(md.Warnings[0]) {
		t.Fatalf("warnings = %v, want one ErrNoProviderID", md.Warnings)
	}
	// The by-name calls, in upstream's order.
	if want := "[node-addresses instance-type get-zone-by-node-name]"; fmt.Sprint(f.Calls) != want {
		t.Fatalf("calls = %s, want %s", f.Calls, want)
	}
}

// An unimplemented zone is a warning, never a silently empty one; a zone
// lookup that fails otherwise is an error, as upstream's.
func TestFromUpstreamLegacyZoneReported(t *testing.T) {
	ctx := context.Background()
	node := cloud.Node{Name: "node-a", ProviderID: "fake://i-a"}
	noZones := &fake.Cloud{DisableZones: true, Addresses: addrs}
	inst, _ := FromUpstream(noZones).Instances()
	md, err := inst.InstanceMetadata(ctx, node)
	if err != nil || md.Zone != "" || len(md.Warnings) != 1 || !errors.Is(md.Warnings[0], cloud.ErrNoZone) {
		t.Fatalf("Zones() false: %+v, %v; want one ErrNoZone warning", md, err)
	}
	notImpl := byNameOnly{Cloud: &fake.Cloud{Addresses: addrs}, zoneByName: cloudprovider.NotImplemented}
	inst, _ = FromUpstream(notImpl).Instances()
	md, err = inst.InstanceMetadata(ctx, node)
	if err != nil || len(md.Warnings) != 1 || !errors.Is(md.Warnings[0], cloud.ErrNoZone) {
		t.Fatalf("zones NotImplemented: %+v, %v; want one ErrNoZone warning", md, err)
	}
	failing := byNameOnly{Cloud: &fake.Cloud{Addresses: addrs}, zoneByName: errors.New("metadata service timeout")}
	inst, _ = FromUpstream(failing).Instances()
	if md, err := inst.InstanceMetadata(ctx, node); err == nil {
		t.Fatalf("a failing zone lookup must be an error, got %+v", md)
	}
}

// As CloudNodeLifecycleController: an instance InstanceID does not find is
// gone (exists false, not shut down); InstanceID NotImplemented is an error.
func TestFromUpstreamLegacyLifecycle(t *testing.T) {
	ctx := context.Background()
	f := &fake.Cloud{ExtIDErr: map[types.NodeName]error{"gone": cloudprovider.InstanceNotFound}, ExistsByProviderID: true}
	inst, _ := FromUpstream(f).Instances()
	if down, err := inst.InstanceShutdown(ctx, cloud.Node{Name: "gone"}); down || err != nil {
		t.Fatalf("shutdown(gone) = %v %v, want false nil", down, err)
	}
	inst, _ = FromUpstream(byNameOnly{Cloud: f}).Instances()
	if ok, err := inst.InstanceExists(ctx, cloud.Node{Name: "node-a"}); ok || !cloud.IsNotImplemented(err) {
		t.Fatalf("exists by name without InstanceID = %v %v, want a NotImplemented error (never a deletion)", ok, err)
	}
}

// The periodic address sync asks a legacy provider for addresses only, as
// upstream's UpdateNodeStatus (getNodeAddressesByProviderIDOrName): by
// providerID, then by name; not the instance ID, type and zone too.
func TestFromUpstreamLegacyAddressesOnly(t *testing.T) {
	f := &fake.Cloud{Provider: "onprem", Addresses: addrs, Zone: cloudprovider.Zone{FailureDomain: "room-1", Region: "dc-1"}}
	inst, _ := FromUpstream(byNameOnly{Cloud: f}).Instances()
	a, ok := inst.(cloud.InstanceAddresser)
	if !ok {
		t.Fatal("the legacy adapter does not offer InstanceAddresses")
	}
	got, err := a.InstanceAddresses(context.Background(), cloud.Node{Name: "node-a"})
	if err != nil || len(got) != len(addrs) {
		t.Fatalf("addresses = %v, %v", got, err)
	}
	if want := "[node-addresses]"; fmt.Sprint(f.Calls) != want {
		t.Fatalf("calls = %s, want %s", f.Calls, want)
	}
}
