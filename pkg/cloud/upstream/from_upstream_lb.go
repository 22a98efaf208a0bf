package upstream

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/portside-io/portside/pkg/cloud"
)

// loadBalancers passes an upstream LoadBalancer what upstream's service
// controller passes it: the cluster name, the Service object itself and the
// Node objects of the hosts (Controller.ensureLoadBalancer,
// lockedUpdateLoadBalancerHosts, syncLoadBalancerIfNeeded).
type loadBalancers struct {
	lb       cloudprovider.LoadBalancer
	features cloud.LoadBalancerFeatures
	nodes    nodeObjects
}

func (l *loadBalancers) Features() cloud.LoadBalancerFeatures { return l.features }

func (l *loadBalancers) GetLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	st, exists, err := l.lb.GetLoadBalancer(ctx, spec.Cluster, service(spec))
	return st, exists, fromUpstreamErr(err)
}

func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	st, err := l.lb.EnsureLoadBalancer(ctx, spec.Cluster, service(spec), l.hostNodes(hosts))
	return st, fromUpstreamErr(err)
}

func (l *loadBalancers) UpdateLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	return fromUpstreamErr(l.lb.UpdateLoadBalancer(ctx, spec.Cluster, service(spec), l.hostNodes(hosts)))
}

func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, spec *cloud.LoadBalancerSpec) error {
	return fromUpstreamErr(l.lb.EnsureLoadBalancerDeleted(ctx, spec.Cluster, service(spec)))
}

// hostNodes returns the hosts' Node objects. Upstream passes the lister's
// objects themselves, not copies (listWithPredicates), and so does this.
func (l *loadBalancers) hostNodes(hosts []cloud.Host) []*corev1.Node {
	nodes := make([]*corev1.Node, len(hosts))
	for i, h := range hosts {
		nodes[i] = l.nodes.object(cloud.Node(h))
	}
	return nodes
}

// service returns the Service the spec was made from (SpecFromService keeps
// it in Object), or, for a spec built by hand, one rebuilt from the spec so
// that the provider never gets nil.
func service(spec *cloud.LoadBalancerSpec) *corev1.Service {
	if spec.Object != nil {
		return spec.Object
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: spec.Service.Namespace, Name: spec.Service.Name, UID: spec.UID},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilies: spec.IPFamilies,
			LoadBalancerIP: spec.RequestedIP, SessionAffinity: corev1.ServiceAffinityNone},
	}
	for _, p := range spec.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
	}
	for _, r := range spec.SourceRanges {
		svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, r.String())
	}
	if spec.ClientIPAffinity {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	if spec.HealthCheck != nil {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = spec.HealthCheck.NodePort
	}
	return svc
}
