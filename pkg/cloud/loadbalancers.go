package cloud

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LoadBalancers provisions L4 load balancers for Services of type
// LoadBalancer. The hosts a method gets are shared with the controller's
// other calls (as upstream shares its node list): read them, never modify
// or keep them.
type LoadBalancers interface {
	// Features declares what the provider's load balancers support.
	Features() LoadBalancerFeatures
	// GetLoadBalancer returns the status of the load balancer for spec, and
	// whether it exists.
	GetLoadBalancer(ctx context.Context, spec *LoadBalancerSpec) (status *corev1.LoadBalancerStatus, exists bool, err error)
	// EnsureLoadBalancer creates or updates the load balancer so that it
	// matches spec and forwards to hosts, and returns its ingress. It may
	// return a *RetryAfterError while the load balancer is being provisioned.
	EnsureLoadBalancer(ctx context.Context, spec *LoadBalancerSpec, hosts []Host) (*corev1.LoadBalancerStatus, error)
	// UpdateLoadBalancerHosts changes only the set of backend hosts.
	UpdateLoadBalancerHosts(ctx context.Context, spec *LoadBalancerSpec, hosts []Host) error
	// EnsureLoadBalancerDeleted deletes the load balancer; deleting one that
	// does not exist succeeds.
	EnsureLoadBalancerDeleted(ctx context.Context, spec *LoadBalancerSpec) error
}

// LoadBalancerFeatures declares what a provider's load balancers support, so
// that the service controller can reject what would not work with a clear
// event instead of a half-working load balancer.
type LoadBalancerFeatures struct {
	// Protocols supported on load balancer ports (TCP, UDP, SCTP).
	Protocols []corev1.Protocol `json:"protocols"`
	// SourceRanges: loadBalancerSourceRanges are enforced.
	SourceRanges bool `json:"sourceRanges"`
	// HealthChecks: the load balancer health-checks healthCheckNodePort for
	// externalTrafficPolicy=Local.
	HealthChecks bool `json:"healthChecks"`
	// DualStack: IPv4 and IPv6 ingress for one Service.
	DualStack bool `json:"dualStack"`
	// MixedProtocols: TCP and UDP ports in one Service.
	MixedProtocols bool `json:"mixedProtocols"`
}

// SupportsProtocol reports whether p is among f.Protocols.
func (f LoadBalancerFeatures) SupportsProtocol(p corev1.Protocol) bool {
	for _, q := range f.Protocols {
		if q == p {
			return true
		}
	}
	return false
}

// Host is a backend node of a load balancer.
type Host struct {
	Name       string
	ProviderID string
	Addresses  []corev1.NodeAddress
	Labels     map[string]string
}

// LoadBalancerPort is one port of a load balancer.
type LoadBalancerPort struct {
	Name     string
	Protocol corev1.Protocol
	// Port is the port on the load balancer's address.
	Port int32
	// NodePort is where the hosts receive the traffic.
	NodePort int32
}

// HealthCheck is the HTTP check of externalTrafficPolicy=Local: GET Path on
// NodePort of each host; only hosts answering 200 get traffic.
type HealthCheck struct {
	Path     string
	NodePort int32
}

// LoadBalancerSpec is the validated description of the load balancer a
// Service asks for. Build it with SpecFromService.
type LoadBalancerSpec struct {
	// Cluster is the --cluster-name; load balancers are tagged with it.
	Cluster string
	// ClusterUID is the UID of the cluster's kube-system namespace, set by
	// the service controller. Unlike Cluster it is unique per cluster, so a
	// provider that tags load balancers with it (and returns it in
	// LoadBalancerRef) lets orphan collection prove a load balancer is this
	// cluster's even when two clusters share a name on one cloud account.
	ClusterUID types.UID
	// Name is the stable cloud name: "a" + the Service UID without dashes,
	// 32 characters at most (as upstream's DefaultLoadBalancerName).
	Name string
	// Service is the namespace/name of the Service.
	Service types.NamespacedName
	UID     types.UID
	// Class is the Service's spec.loadBalancerClass ("" for none): the
	// class of the controller that made the load balancer. Kept as a tag,
	// it lets orphan collection tell apart controllers of different classes
	// in one cluster.
	Class string
	Ports []LoadBalancerPort
	// SourceRanges limit the clients; empty means everyone.
	SourceRanges []netip.Prefix
	// HealthCheck is set for externalTrafficPolicy=Local.
	HealthCheck *HealthCheck
	IPFamilies  []corev1.IPFamily
	// RequestedIP is spec.loadBalancerIP, if set.
	RequestedIP string
	// ClientIPAffinity is sessionAffinity=ClientIP.
	ClientIPAffinity bool
	// Object is the Service itself, read-only, for providers that read
	// their own annotations.
	Object *corev1.Service
}

// AnnotationLoadBalancerSourceRanges is the annotation read when
// spec.loadBalancerSourceRanges is empty.
const AnnotationLoadBalancerSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// LoadBalancerName returns the cloud name of the load balancer for a Service
// UID, as upstream's DefaultLoadBalancerName does.
func LoadBalancerName(uid types.UID) string {
	name := "a" + strings.ReplaceAll(string(uid), "-", "")
	if len(name) > 32 {
		name = name[:32]
	}
	return name
}

// SpecFromService validates svc and returns its load balancer spec. Errors
// name the offending field and value.
func SpecFromService(cluster string, svc *corev1.Service) (*LoadBalancerSpec, error) {
	spec := &LoadBalancerSpec{
		Cluster:          cluster,
		Name:             LoadBalancerName(svc.UID),
		Service:          types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		UID:              svc.UID,
		Class:            ptrString(svc.Spec.LoadBalancerClass),
		IPFamilies:       svc.Spec.IPFamilies,
		RequestedIP:      svc.Spec.LoadBalancerIP,
		ClientIPAffinity: svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP,
		Object:           svc,
	}
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if p.NodePort == 0 && (svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts) {
			return nil, fmt.Errorf("port %d/%s has no nodePort yet", p.Port, proto)
		}
		spec.Ports = append(spec.Ports, LoadBalancerPort{Name: p.Name, Protocol: proto, Port: p.Port, NodePort: p.NodePort})
	}
	if len(spec.Ports) == 0 {
		return nil, fmt.Errorf("service %s has no ports", spec.Service)
	}
	ranges, err := SourceRanges(svc)
	if err != nil {
		return nil, err
	}
	spec.SourceRanges = ranges
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0 {
		spec.HealthCheck = &HealthCheck{Path: "/healthz", NodePort: svc.Spec.HealthCheckNodePort}
	}
	return spec, nil
}

// SourceRanges returns the Service's client source ranges: the
// loadBalancerSourceRanges field, else the annotation, else none (everyone).
func SourceRanges(svc *corev1.Service) ([]netip.Prefix, error) {
	raw, from := svc.Spec.LoadBalancerSourceRanges, "spec.loadBalancerSourceRanges"
	if len(raw) == 0 {
		if v := strings.TrimSpace(svc.Annotations[AnnotationLoadBalancerSourceRanges]); v != "" {
			raw, from = strings.Split(v, ","), "annotation "+AnnotationLoadBalancerSourceRanges
		}
	}
	var out []netip.Prefix
	for _, r := range raw {
		r = strings.TrimSpace(r)
		p, err := netip.ParsePrefix(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR (want e.g. 203.0.113.0/24)", from, r)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// LoadBalancerRef identifies a load balancer a provider made for a Service.
type LoadBalancerRef struct {
	// Name is the cloud name (LoadBalancerSpec.Name).
	Name string
	// Service and UID are those of the Service it was made for.
	Service types.NamespacedName
	UID     types.UID
	// ClusterUID and Class are the LoadBalancerSpec's it was made with;
	// ClusterUID is empty when the provider does not keep them. Orphan
	// collection deletes only load balancers whose ClusterUID, Class and UID
	// prove them made by this cluster's controller of this class: one
	// without them is never deleted by the collector.
	ClusterUID types.UID
	Class      string
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// LoadBalancerLister is optionally implemented by a provider's
// LoadBalancers: listing the load balancers it made for a cluster lets
// Portside delete those whose Service is gone (deleted while the CCM was
// down, or its finalizer removed by hand), so none is ever leaked. Only
// refs that carry ClusterUID, Service and UID are ever collected.
type LoadBalancerLister interface {
	ListLoadBalancers(ctx context.Context, cluster string) ([]LoadBalancerRef, error)
}

// LoadBalancerHostChanger is an optional capability of LoadBalancers:
// adding and removing backend hosts without sending the whole set, as a
// cloud's target groups do. With it, a node joining or leaving costs the
// cloud one small change per load balancer instead of rewriting every
// load balancer's full host list. The service controller uses it for host
// changes when the provider has it, and UpdateLoadBalancerHosts otherwise
// (and while two hosts of the old or the new set share an address, which a
// difference keyed by host cannot describe to a cloud keyed by address).
type LoadBalancerHostChanger interface {
	// ChangeLoadBalancerHosts removes the hosts in remove, then adds those
	// in add. Adding a host the load balancer has updates it in place (the
	// service controller sends a host changed only in its labels that way,
	// never as a removal, so it is not drained), and removing one it does
	// not have is not an error (a retried change is harmless). It returns
	// an error wrapping ErrNotFound when the load balancer does not exist.
	ChangeLoadBalancerHosts(ctx context.Context, spec *LoadBalancerSpec, add, remove []Host) error
}
