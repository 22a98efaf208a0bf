package local

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

type instances Provider

// instance finds the instance of a node: by providerID, else by name.
func (p *instances) instance(ctx context.Context, n cloud.Node) (*api.Instance, error) {
	if n.ProviderID != "" {
		id, err := cloud.ParseProviderID(ProviderName, n.ProviderID)
		if err != nil {
			return nil, err
		}
		inst, err := p.c.GetInstance(ctx, id)
		return inst, sdkErr(err, "instance "+id)
	}
	inst, err := p.c.InstanceByName(ctx, n.Name)
	return inst, sdkErr(err, "instance of node "+n.Name)
}

func (p *instances) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	inst, err := p.instance(ctx, n)
	if err != nil {
		return nil, err
	}
	md := &cloud.InstanceMetadata{
		ProviderID:       cloud.ProviderID(ProviderName, inst.ID),
		InstanceType:     inst.Type,
		Zone:             inst.Zone,
		Region:           inst.Region,
		AdditionalLabels: inst.Labels,
	}
	for _, a := range inst.Addresses {
		md.Addresses = append(md.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	for _, c := range inst.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil { // the cloud validated it
			md.PodCIDRs = append(md.PodCIDRs, p)
		}
	}
	return md, nil
}

func (p *instances) InstanceExists(ctx context.Context, n cloud.Node) (bool, error) {
	_, err := p.instance(ctx, n)
	if cloud.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func (p *instances) InstanceShutdown(ctx context.Context, n cloud.Node) (bool, error) {
	inst, err := p.instance(ctx, n)
	if err != nil {
		return false, err
	}
	return inst.State == api.InstanceStopped, nil
}
