package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/pkg/cloud"
)

// ToUpstream exposes a Portside provider as an upstream
// cloudprovider.Interface. It offers InstancesV2 (not the deprecated
// Instances and Zones), LoadBalancer, Routes, and PVLabeler when the
// provider has volumes.
func ToUpstream(p cloud.Provider) cloudprovider.Interface {
	if _, ok := p.Volumes(); ok {
		return &toUpstreamWithVolumes{toUpstream{p: p}}
	}
	return &toUpstream{p: p}
}

type toUpstream struct{ p cloud.Provider }

var (
	_ cloudprovider.Interface = (*toUpstream)(nil)
	_ cloudprovider.PVLabeler = (*toUpstreamWithVolumes)(nil)
)

func (t *toUpstream) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (t *toUpstream) ProviderName() string                                              { return t.p.ProviderName() }
func (t *toUpstream) HasClusterID() bool                                                { return true }
func (t *toUpstream) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (t *toUpstream) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (t *toUpstream) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }

func (t *toUpstream) InstancesV2() (cloudprovider.InstancesV2, bool) {
	i, ok := t.p.Instances()
	if !ok {
		return nil, false
	}
	return &upInstances{i: i}, true
}

func (t *toUpstream) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	lb, ok := t.p.LoadBalancers()
	if !ok {
		return nil, false
	}
	return &upLoadBalancer{lb: lb}, true
}

func (t *toUpstream) Routes() (cloudprovider.Routes, bool) {
	r, ok := t.p.Routes()
	if !ok {
		return nil, false
	}
	return &upRoutes{r: r}, true
}

type toUpstreamWithVolumes struct{ toUpstream }

// GetLabelsForVolume returns the zone and region labels of a volume, with
// several zones joined by "__" as upstream does.
func (t *toUpstreamWithVolumes) GetLabelsForVolume(ctx context.Context, pv *corev1.PersistentVolume) (map[string]string, error) {
	v, _ := t.p.Volumes()
	topo, err := v.VolumeTopology(ctx, pv)
	if cloud.IsNotImplemented(err) {
		return nil, nil // not one of ours: no labels, as upstream labelers do
	}
	if err != nil {
		return nil, toUpstreamErr(err)
	}
	labels := map[string]string{}
	if len(topo.Zones) > 0 {
		labels[corev1.LabelTopologyZone] = strings.Join(topo.Zones, zonesSeparator)
	}
	if topo.Region != "" {
		labels[corev1.LabelTopologyRegion] = topo.Region
	}
	return labels, nil
}

type upInstances struct{ i cloud.Instances }

func (u *upInstances) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	ok, err := u.i.InstanceExists(ctx, cloud.NodeFrom(node))
	return ok, toUpstreamErr(err)
}

func (u *upInstances) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	ok, err := u.i.InstanceShutdown(ctx, cloud.NodeFrom(node))
	return ok, toUpstreamErr(err)
}

func (u *upInstances) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	md, err := u.i.InstanceMetadata(ctx, cloud.NodeFrom(node))
	if err != nil {
		return nil, toUpstreamErr(err)
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID: md.ProviderID, InstanceType: md.InstanceType, NodeAddresses: md.Addresses,
		Zone: md.Zone, Region: md.Region, AdditionalLabels: md.AdditionalLabels,
	}, nil
}

type upLoadBalancer struct{ lb cloud.LoadBalancers }

func (u *upLoadBalancer) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloud.LoadBalancerName(svc.UID)
}

func (u *upLoadBalancer) GetLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	spec, err := lbSpec(cluster, svc)
	if err != nil {
		return nil, false, err
	}
	st, exists, err := u.lb.GetLoadBalancer(ctx, spec)
	return st, exists, toUpstreamErr(err)
}

func (u *upLoadBalancer) EnsureLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	spec, err := cloud.SpecFromService(cluster, svc)
	if err != nil {
		return nil, err
	}
	st, err := u.lb.EnsureLoadBalancer(ctx, spec, hostsFrom(nodes))
	return st, toUpstreamErr(err)
}

func (u *upLoadBalancer) UpdateLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) error {
	spec, err := cloud.SpecFromService(cluster, svc)
	if err != nil {
		return err
	}
	return toUpstreamErr(u.lb.UpdateLoadBalancerHosts(ctx, spec, hostsFrom(nodes)))
}

func (u *upLoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, cluster string, svc *corev1.Service) error {
	spec, err := lbSpec(cluster, svc)
	if err != nil {
		return err
	}
	return toUpstreamErr(u.lb.EnsureLoadBalancerDeleted(ctx, spec))
}

// lbSpec is SpecFromService for Get and Delete, which must work even for a
// Service that is no longer valid (e.g. its type changed or a port was
// removed): only the identity matters then.
func lbSpec(cluster string, svc *corev1.Service) (*cloud.LoadBalancerSpec, error) {
	if spec, err := cloud.SpecFromService(cluster, svc); err == nil {
		return spec, nil
	}
	return &cloud.LoadBalancerSpec{
		Cluster: cluster, Name: cloud.LoadBalancerName(svc.UID),
		Service: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, UID: svc.UID, Object: svc,
	}, nil
}

func hostsFrom(nodes []*corev1.Node) []cloud.Host {
	hosts := make([]cloud.Host, len(nodes))
	for i, n := range nodes {
		hosts[i] = cloud.Host(cloud.NodeFrom(n))
	}
	return hosts
}

type upRoutes struct{ r cloud.Routes }

func (u *upRoutes) ListRoutes(ctx context.Context, cluster string) ([]*cloudprovider.Route, error) {
	list, err := u.r.ListRoutes(ctx, cluster)
	if err != nil {
		return nil, toUpstreamErr(err)
	}
	out := make([]*cloudprovider.Route, len(list))
	for i, rt := range list {
		out[i] = upstreamRoute(rt)
	}
	return out, nil
}

func (u *upRoutes) CreateRoute(ctx context.Context, cluster, nameHint string, rt *cloudprovider.Route) error {
	r, err := sdkRoute(rt)
	if err != nil {
		return err
	}
	return toUpstreamErr(u.r.CreateRoute(ctx, cluster, nameHint, r))
}

func (u *upRoutes) DeleteRoute(ctx context.Context, cluster string, rt *cloudprovider.Route) error {
	r, err := sdkRoute(rt)
	if err != nil {
		return err
	}
	return toUpstreamErr(u.r.DeleteRoute(ctx, cluster, r))
}

func sdkRoute(rt *cloudprovider.Route) (cloud.Route, error) {
	p, err := netip.ParsePrefix(rt.DestinationCIDR)
	if err != nil {
		return cloud.Route{}, fmt.Errorf("route %q: destination %q is not a CIDR: %w", rt.Name, rt.DestinationCIDR, err)
	}
	return cloud.Route{Name: rt.Name, TargetNode: string(rt.TargetNode), DestinationCIDR: p, Blackhole: rt.Blackhole,
		TargetNodeAddresses: rt.TargetNodeAddresses, EnableNodeAddresses: rt.EnableNodeAddresses}, nil
}
