package upstream

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/pkg/cloud"
)

// nodeObjects finds the *corev1.Node that upstream methods take. Upstream's
// controllers pass the informer's Node, so a provider may read anything on
// it (annotations, UID, labels, taints, conditions, status.nodeInfo); the
// SDK's cloud.Node and cloud.Host carry only the name, providerID,
// addresses and labels, so the full object comes from the node lister.
type nodeObjects struct{ getter NodeGetter }

// object returns the cluster's Node for n, or one rebuilt from n when there
// is no lister or it does not have that node (yet, or any more).
func (o nodeObjects) object(n cloud.Node) *corev1.Node {
	if o.getter != nil {
		if obj, err := o.getter.Get(n.Name); err == nil && obj != nil {
			switch {
			case n.ProviderID == "" || obj.Spec.ProviderID == n.ProviderID:
				return obj
			case obj.Spec.ProviderID == "":
				// The caller already knows the providerID the lister has
				// not seen yet: the same node, one write later.
				cp := *obj
				cp.Spec.ProviderID = n.ProviderID
				return &cp
			}
			// Another instance under the same name: the caller's view wins.
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels},
		Spec:       corev1.NodeSpec{ProviderID: n.ProviderID},
		Status:     corev1.NodeStatus{Addresses: n.Addresses},
	}
}

// private returns a copy the provider may change, as upstream's node
// controllers hand InstancesV2 a DeepCopy (CloudNodeController.syncNode,
// CloudNodeLifecycleController.MonitorNodes).
func (o nodeObjects) private(n cloud.Node) *corev1.Node { return o.object(n).DeepCopy() }

// instancesV2 serves a provider with InstancesV2: each call takes the Node.
type instancesV2 struct {
	v2    cloudprovider.InstancesV2
	nodes nodeObjects
}

func (i *instancesV2) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	md, err := i.v2.InstanceMetadata(ctx, i.nodes.private(n))
	if err != nil {
		return nil, fromUpstreamErr(err)
	}
	if md == nil {
		return nil, fmt.Errorf("instance of node %q: %w (provider returned no metadata)", n.Name, cloud.ErrNotFound)
	}
	// A provider may leave ProviderID empty for a node that has one; upstream
	// keeps the node's (CloudNodeController.getInstanceMetadata).
	pid := md.ProviderID
	if pid == "" {
		pid = n.ProviderID
	}
	return &cloud.InstanceMetadata{
		ProviderID: pid, InstanceType: md.InstanceType, Addresses: md.NodeAddresses,
		Zone: md.Zone, Region: md.Region, AdditionalLabels: md.AdditionalLabels,
	}, nil
}

func (i *instancesV2) InstanceExists(ctx context.Context, n cloud.Node) (bool, error) {
	ok, err := i.v2.InstanceExists(ctx, i.nodes.private(n))
	return ok, fromUpstreamErr(err)
}

func (i *instancesV2) InstanceShutdown(ctx context.Context, n cloud.Node) (bool, error) {
	ok, err := i.v2.InstanceShutdown(ctx, i.nodes.private(n))
	return ok, fromUpstreamErr(err)
}
