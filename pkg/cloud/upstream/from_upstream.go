package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/pkg/cloud"
)

// DefaultLoadBalancerFeatures is what FromUpstream declares for an upstream
// load balancer, which cannot say what it supports: TCP and UDP, source
// ranges and health checks (what upstream's service controller assumes).
var DefaultLoadBalancerFeatures = cloud.LoadBalancerFeatures{
	Protocols:    []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP},
	SourceRanges: true,
	HealthChecks: true,
}

// Option configures FromUpstream.
type Option func(*fromUpstream)

// WithLoadBalancerFeatures declares the upstream provider's load-balancer features.
func WithLoadBalancerFeatures(f cloud.LoadBalancerFeatures) Option {
	return func(u *fromUpstream) { u.lbFeatures = f }
}

// FromUpstream wraps an upstream provider as a Portside provider. The caller
// must have called c.Initialize if the provider needs it.
func FromUpstream(c cloudprovider.Interface, opts ...Option) cloud.Provider {
	u := &fromUpstream{c: c, lbFeatures: DefaultLoadBalancerFeatures}
	for _, o := range opts {
		o(u)
	}
	return u
}

type fromUpstream struct {
	c          cloudprovider.Interface
	lbFeatures cloud.LoadBalancerFeatures
}

var _ cloud.Provider = (*fromUpstream)(nil)

func (u *fromUpstream) ProviderName() string { return u.c.ProviderName() }

func (u *fromUpstream) Instances() (cloud.Instances, bool) {
	if v2, ok := u.c.InstancesV2(); ok && v2 != nil {
		return &instancesV2{v2: v2}, true
	}
	if v1, ok := u.c.Instances(); ok && v1 != nil {
		zones, _ := u.c.Zones()
		return &instancesV1{provider: u.c.ProviderName(), v1: v1, zones: zones}, true
	}
	return nil, false
}

func (u *fromUpstream) LoadBalancers() (cloud.LoadBalancers, bool) {
	lb, ok := u.c.LoadBalancer()
	if !ok || lb == nil {
		return nil, false
	}
	return &loadBalancers{lb: lb, features: u.lbFeatures}, true
}

func (u *fromUpstream) Routes() (cloud.Routes, bool) {
	r, ok := u.c.Routes()
	if !ok || r == nil {
		return nil, false
	}
	return &routes{r: r}, true
}

func (u *fromUpstream) Volumes() (cloud.Volumes, bool) {
	l, ok := u.c.(cloudprovider.PVLabeler)
	if !ok {
		return nil, false
	}
	return &volumes{l: l}, true
}

// RegistryCredentials: upstream providers have no such interface; their
// credential providers are separate binaries.
func (u *fromUpstream) RegistryCredentials() (cloud.RegistryCredentials, bool) { return nil, false }

// upstreamNode builds the *v1.Node upstream methods take from what the SDK knows.
func upstreamNode(n cloud.Node) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels},
		Spec:       corev1.NodeSpec{ProviderID: n.ProviderID},
		Status:     corev1.NodeStatus{Addresses: n.Addresses},
	}
}

type instancesV2 struct{ v2 cloudprovider.InstancesV2 }

func (i *instancesV2) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	md, err := i.v2.InstanceMetadata(ctx, upstreamNode(n))
	if err != nil {
		return nil, fromUpstreamErr(err)
	}
	if md == nil {
		return nil, fmt.Errorf("instance of node %q: %w (provider returned no metadata)", n.Name, cloud.ErrNotFound)
	}
	return &cloud.InstanceMetadata{
		ProviderID: md.ProviderID, InstanceType: md.InstanceType, Addresses: md.NodeAddresses,
		Zone: md.Zone, Region: md.Region, AdditionalLabels: md.AdditionalLabels,
	}, nil
}

func (i *instancesV2) InstanceExists(ctx context.Context, n cloud.Node) (bool, error) {
	ok, err := i.v2.InstanceExists(ctx, upstreamNode(n))
	return ok, fromUpstreamErr(err)
}

func (i *instancesV2) InstanceShutdown(ctx context.Context, n cloud.Node) (bool, error) {
	ok, err := i.v2.InstanceShutdown(ctx, upstreamNode(n))
	return ok, fromUpstreamErr(err)
}

// instancesV1 composes InstanceMetadata from the older Instances and Zones
// interfaces, by providerID when the node has one, else by node name.
type instancesV1 struct {
	provider string
	v1       cloudprovider.Instances
	zones    cloudprovider.Zones
}

func (i *instancesV1) providerID(ctx context.Context, n cloud.Node) (string, error) {
	if n.ProviderID != "" {
		return n.ProviderID, nil
	}
	id, err := i.v1.InstanceID(ctx, types.NodeName(n.Name))
	if err != nil {
		return "", fromUpstreamErr(err)
	}
	return cloud.ProviderID(i.provider, id), nil
}

func (i *instancesV1) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	pid, err := i.providerID(ctx, n)
	if err != nil {
		return nil, err
	}
	md := &cloud.InstanceMetadata{ProviderID: pid}
	if md.InstanceType, err = i.v1.InstanceTypeByProviderID(ctx, pid); err != nil {
		return nil, fromUpstreamErr(err)
	}
	if md.Addresses, err = i.v1.NodeAddressesByProviderID(ctx, pid); err != nil {
		return nil, fromUpstreamErr(err)
	}
	if i.zones != nil {
		z, err := i.zones.GetZoneByProviderID(ctx, pid)
		if err != nil && !cloud.IsNotImplemented(fromUpstreamErr(err)) {
			return nil, fromUpstreamErr(err)
		}
		md.Zone, md.Region = z.FailureDomain, z.Region
	}
	return md, nil
}

func (i *instancesV1) InstanceExists(ctx context.Context, n cloud.Node) (bool, error) {
	pid, err := i.providerID(ctx, n)
	if cloud.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ok, err := i.v1.InstanceExistsByProviderID(ctx, pid)
	return ok, fromUpstreamErr(err)
}

func (i *instancesV1) InstanceShutdown(ctx context.Context, n cloud.Node) (bool, error) {
	pid, err := i.providerID(ctx, n)
	if err != nil {
		return false, err
	}
	ok, err := i.v1.InstanceShutdownByProviderID(ctx, pid)
	return ok, fromUpstreamErr(err)
}

type loadBalancers struct {
	lb       cloudprovider.LoadBalancer
	features cloud.LoadBalancerFeatures
}

func (l *loadBalancers) Features() cloud.LoadBalancerFeatures { return l.features }

func (l *loadBalancers) GetLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	st, exists, err := l.lb.GetLoadBalancer(ctx, spec.Cluster, spec.Object)
	return st, exists, fromUpstreamErr(err)
}

func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	st, err := l.lb.EnsureLoadBalancer(ctx, spec.Cluster, spec.Object, upstreamNodes(hosts))
	return st, fromUpstreamErr(err)
}

func (l *loadBalancers) UpdateLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	return fromUpstreamErr(l.lb.UpdateLoadBalancer(ctx, spec.Cluster, spec.Object, upstreamNodes(hosts)))
}

func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, spec *cloud.LoadBalancerSpec) error {
	return fromUpstreamErr(l.lb.EnsureLoadBalancerDeleted(ctx, spec.Cluster, spec.Object))
}

func upstreamNodes(hosts []cloud.Host) []*corev1.Node {
	nodes := make([]*corev1.Node, len(hosts))
	for i, h := range hosts {
		nodes[i] = upstreamNode(cloud.Node(h))
	}
	return nodes
}

type routes struct{ r cloudprovider.Routes }

func (r *routes) ListRoutes(ctx context.Context, cluster string) ([]cloud.Route, error) {
	list, err := r.r.ListRoutes(ctx, cluster)
	if err != nil {
		return nil, fromUpstreamErr(err)
	}
	out := make([]cloud.Route, 0, len(list))
	for _, rt := range list {
		p, err := netip.ParsePrefix(rt.DestinationCIDR)
		if err != nil {
			return nil, fmt.Errorf("route %q has an invalid destination %q: %w", rt.Name, rt.DestinationCIDR, err)
		}
		out = append(out, cloud.Route{Name: rt.Name, TargetNode: string(rt.TargetNode), DestinationCIDR: p, Blackhole: rt.Blackhole,
			TargetNodeAddresses: rt.TargetNodeAddresses, EnableNodeAddresses: rt.EnableNodeAddresses})
	}
	return out, nil
}

func (r *routes) CreateRoute(ctx context.Context, cluster, nameHint string, rt cloud.Route) error {
	return fromUpstreamErr(r.r.CreateRoute(ctx, cluster, nameHint, upstreamRoute(rt)))
}

func (r *routes) DeleteRoute(ctx context.Context, cluster string, rt cloud.Route) error {
	return fromUpstreamErr(r.r.DeleteRoute(ctx, cluster, upstreamRoute(rt)))
}

func upstreamRoute(rt cloud.Route) *cloudprovider.Route {
	return &cloudprovider.Route{Name: rt.Name, TargetNode: types.NodeName(rt.TargetNode), DestinationCIDR: rt.DestinationCIDR.String(), Blackhole: rt.Blackhole,
		TargetNodeAddresses: rt.TargetNodeAddresses, EnableNodeAddresses: rt.EnableNodeAddresses}
}

// Upstream separates several zones of a regional volume with "__".
const zonesSeparator = "__"

type volumes struct{ l cloudprovider.PVLabeler }

func (v *volumes) VolumeTopology(ctx context.Context, pv *corev1.PersistentVolume) (*cloud.VolumeTopology, error) {
	labels, err := v.l.GetLabelsForVolume(ctx, pv)
	if err != nil {
		return nil, fromUpstreamErr(err)
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("volume %q: %w", pv.Name, cloud.ErrNotImplemented)
	}
	zone := firstNonEmpty(labels[corev1.LabelTopologyZone], labels[corev1.LabelFailureDomainBetaZone])
	t := &cloud.VolumeTopology{Region: firstNonEmpty(labels[corev1.LabelTopologyRegion], labels[corev1.LabelFailureDomainBetaRegion])}
	if zone != "" {
		t.Zones = strings.Split(zone, zonesSeparator)
	}
	return t, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
