package upstream

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/pkg/cloud"
)

// DefaultLoadBalancerFeatures is what FromUpstream declares for an upstream
// load balancer: everything. Upstream's service controller hands every
// Service of type LoadBalancer without a class to the provider, whatever
// its protocols, families, source ranges or traffic policy
// (controllers/service wantsLoadBalancer), and the provider decides: it
// returns an error for what it cannot do, which becomes an event. Declaring
// less would make Portside refuse Services the provider accepts under
// upstream.
var DefaultLoadBalancerFeatures = cloud.LoadBalancerFeatures{
	Protocols:      []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP},
	SourceRanges:   true,
	HealthChecks:   true,
	DualStack:      true,
	MixedProtocols: true,
}

// Option configures FromUpstream.
type Option func(*fromUpstream)

// WithLoadBalancerFeatures declares the upstream provider's load-balancer
// features, so that Portside refuses with a clear event what the provider
// is known to fail on. The default (DefaultLoadBalancerFeatures) lets the
// provider decide everything, as under upstream.
func WithLoadBalancerFeatures(f cloud.LoadBalancerFeatures) Option {
	return func(u *fromUpstream) { u.lbFeatures = f }
}

// NodeGetter gets a Node by name; a client-go NodeLister is one.
type NodeGetter interface {
	Get(name string) (*corev1.Node, error)
}

// WithNodes gives the adapter the cluster's Nodes (the CCM's node lister),
// so that upstream methods receive the full Node objects upstream's
// controllers pass them (annotations, UID, taints, conditions,
// status.nodeInfo...), not only what cloud.Node and cloud.Host carry.
// Without it, the adapter passes Nodes rebuilt from those fields.
func WithNodes(nodes NodeGetter) Option {
	return func(u *fromUpstream) { u.nodes.getter = nodes }
}

// FromUpstream wraps an upstream provider as a Portside provider. The caller
// must have called c.Initialize if the provider needs it, and should pass
// WithNodes.
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
	nodes      nodeObjects
}

var _ cloud.Provider = (*fromUpstream)(nil)

func (u *fromUpstream) ProviderName() string { return u.c.ProviderName() }

// Instances prefers InstancesV2, as upstream's node controllers do
// (CloudNodeController.getInstanceMetadata, CloudNodeLifecycleController.ensureNodeExistsByProviderID).
func (u *fromUpstream) Instances() (cloud.Instances, bool) {
	if v2, ok := u.c.InstancesV2(); ok && v2 != nil {
		return &instancesV2{v2: v2, nodes: u.nodes}, true
	}
	if v1, ok := u.c.Instances(); ok && v1 != nil {
		i := &instancesV1{c: u.c, v1: v1}
		if zones, ok := u.c.Zones(); ok && zones != nil {
			i.zones = zones
		}
		return i, true
	}
	return nil, false
}

func (u *fromUpstream) LoadBalancers() (cloud.LoadBalancers, bool) {
	lb, ok := u.c.LoadBalancer()
	if !ok || lb == nil {
		return nil, false
	}
	return &loadBalancers{lb: lb, features: u.lbFeatures, nodes: u.nodes}, true
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
