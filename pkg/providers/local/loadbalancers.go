package local

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

type loadBalancers Provider

// Tags the local provider puts on its load balancers, so an operator (and
// orphan collection) can tell which Service a load balancer is for.
const (
	TagServiceName = "kubernetes.io/service-name"
	TagServiceUID  = "kubernetes.io/service-uid"
	// TagClusterUID is the UID of the cluster's kube-system namespace:
	// proof, for orphan collection, that the load balancer is this
	// cluster's and not a same-named cluster's.
	TagClusterUID = "kubernetes.io/cluster-uid"
	// TagLoadBalancerClass is the Service's loadBalancerClass, absent for
	// none: the class of the controller that made it.
	TagLoadBalancerClass = "kubernetes.io/load-balancer-class"
)

// AnnotationDataPath on a Service chooses its load balancer's data path
// in a local cloud with real machines: "kernel" (the default: the VPC
// router rewrites the flows to the nodes, no proxy) or "proxy" (the
// cloud's proxy carries every flow, under its connection caps).
const AnnotationDataPath = "service.beta.kubernetes.io/portside-load-balancer-data-path"

// dataPath is the Service's AnnotationDataPath as the cloud's dataPath.
func dataPath(spec *cloud.LoadBalancerSpec) (string, error) {
	if spec.Object == nil {
		return "", nil
	}
	v, ok := spec.Object.Annotations[AnnotationDataPath]
	if !ok {
		return "", nil
	}
	switch p := strings.ToLower(strings.TrimSpace(v)); p {
	case api.DataPathKernel, api.DataPathProxy:
		return p, nil
	default:
		return "", fmt.Errorf("annotation %s=%q: use %q (the default) or %q", AnnotationDataPath, v, api.DataPathKernel, api.DataPathProxy)
	}
}

func (p *loadBalancers) Features() cloud.LoadBalancerFeatures {
	return cloud.LoadBalancerFeatures{
		Protocols:      []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP},
		SourceRanges:   true,
		HealthChecks:   true,
		DualStack:      p.dualStack,
		MixedProtocols: true,
	}
}

func (p *loadBalancers) GetLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := p.c.GetLoadBalancer(ctx, spec.Name)
	if err = sdkErr(err, "load balancer "+spec.Name); cloud.IsNotFound(err) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	return status(lb), true, nil
}

func (p *loadBalancers) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	req := api.LoadBalancerSpec{
		Cluster:          spec.Cluster,
		Tags:             lbTags(spec),
		Backends:         backends(hosts, spec.IPFamilies),
		RequestedIP:      spec.RequestedIP,
		ClientIPAffinity: spec.ClientIPAffinity,
	}
	path, err := dataPath(spec)
	if err != nil {
		return nil, err
	}
	req.DataPath = path
	req.Listeners, req.HealthCheck = listenersAndCheck(spec)
	for _, r := range spec.SourceRanges {
		req.SourceRanges = append(req.SourceRanges, r.String())
	}
	for _, f := range spec.IPFamilies {
		req.IPFamilies = append(req.IPFamilies, string(f))
	}
	lb, err := p.c.PutLoadBalancer(ctx, spec.Name, req)
	if err != nil {
		return nil, sdkErr(err, "ensure load balancer "+spec.Name)
	}
	if lb.State != api.LoadBalancerActive {
		return nil, fmt.Errorf("load balancer %s is %s: %s", spec.Name, lb.State, lb.Message)
	}
	return status(lb), nil
}

// KubeProxyHealthzPort is kube-proxy's health server (--healthz-bind-address
// default): 200 while its rules are in sync and the node is not going.
const KubeProxyHealthzPort = 10256

// listenersAndCheck maps the Service's ports to listeners (the NodePort as
// backend port) and picks the health check: ETP=Local's healthCheckNodePort
// (only nodes with endpoints answer 200); else a TCP connect to the
// NodePorts; for a Service without NodePorts (allocateLoadBalancerNodePorts
// false: the cloud routes the VIP to the nodes, kube-proxy serves it)
// kube-proxy's own health, as clouds check nodes for ETP=Cluster.
func listenersAndCheck(spec *cloud.LoadBalancerSpec) ([]api.Listener, *api.HealthCheck) {
	var ls []api.Listener
	noNodePort := false
	for _, port := range spec.Ports {
		ls = append(ls, api.Listener{Name: port.Name, Protocol: string(port.Protocol), Port: int(port.Port), BackendPort: int(port.NodePort)})
		noNodePort = noNodePort || port.NodePort == 0
	}
	switch {
	case spec.HealthCheck != nil:
		return ls, &api.HealthCheck{Type: api.HealthCheckHTTP, Path: spec.HealthCheck.Path, Port: int(spec.HealthCheck.NodePort)}
	case noNodePort:
		return ls, &api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: KubeProxyHealthzPort}
	default:
		return ls, &api.HealthCheck{Type: api.HealthCheckTCP}
	}
}

func lbTags(spec *cloud.LoadBalancerSpec) map[string]string {
	tags := map[string]string{TagServiceName: spec.Service.String(), TagServiceUID: string(spec.UID)}
	if spec.ClusterUID != "" {
		tags[TagClusterUID] = string(spec.ClusterUID)
	}
	if spec.Class != "" {
		tags[TagLoadBalancerClass] = spec.Class
	}
	return tags
}

func (p *loadBalancers) UpdateLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	_, err := p.c.SetBackends(ctx, spec.Name, backends(hosts, spec.IPFamilies))
	return sdkErr(err, "update hosts of load balancer "+spec.Name)
}

// ChangeLoadBalancerHosts sends only the hosts that changed: the cloud
// writes and programs those backends alone (cloud.LoadBalancerHostChanger).
func (p *loadBalancers) ChangeLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, add, remove []cloud.Host) error {
	_, err := p.c.ChangeBackends(ctx, spec.Name, backends(add, spec.IPFamilies), backends(remove, spec.IPFamilies))
	return sdkErr(err, "change hosts of load balancer "+spec.Name)
}

func (p *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, spec *cloud.LoadBalancerSpec) error {
	// The name is the Service UID's, so a collision is all but impossible;
	// the tags make it provable: a load balancer tagged for another
	// Service or cluster is not this spec's, whatever its name.
	lb, err := p.c.GetLoadBalancer(ctx, spec.Name)
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return sdkErr(err, "get load balancer "+spec.Name)
	}
	if why := NotDeletableFor(lb.Tags, spec); why != "" {
		return fmt.Errorf("not deleting load balancer %s: %s", spec.Name, why)
	}
	err = sdkErr(p.c.DeleteLoadBalancer(ctx, spec.Name), "delete load balancer "+spec.Name)
	if cloud.IsNotFound(err) {
		return nil
	}
	return err
}

// backends picks, for each host, its InternalIP of each wanted family
// (IPv4 when none is given), falling back to ExternalIP.
func backends(hosts []cloud.Host, families []corev1.IPFamily) []api.Backend {
	if len(families) == 0 {
		families = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	out := []api.Backend{}
	for _, h := range hosts {
		for _, fam := range families {
			if addr := hostAddress(h, fam); addr != "" {
				out = append(out, api.Backend{Name: h.Name, Address: addr})
			}
		}
	}
	return out
}

func hostAddress(h cloud.Host, fam corev1.IPFamily) string {
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range h.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || a.Type != typ {
				continue
			}
			if (fam == corev1.IPv6Protocol) == ip.Is6() {
				return a.Address
			}
		}
	}
	return ""
}

func status(lb *api.LoadBalancer) *corev1.LoadBalancerStatus {
	vip := corev1.LoadBalancerIPModeVIP
	st := &corev1.LoadBalancerStatus{}
	for _, ip := range lb.VIPs {
		ing := corev1.LoadBalancerIngress{IP: ip, IPMode: &vip}
		for _, l := range lb.Listeners {
			ing.Ports = append(ing.Ports, corev1.PortStatus{Port: int32(l.Port), Protocol: corev1.Protocol(l.Protocol)})
		}
		st.Ingress = append(st.Ingress, ing)
	}
	return st
}

var _ cloud.LoadBalancerLister = (*loadBalancers)(nil)

// ListLoadBalancers lists the cluster's load balancers with the Service
// they were made for, from their tags.
func (p *loadBalancers) ListLoadBalancers(ctx context.Context, cluster string) ([]cloud.LoadBalancerRef, error) {
	list, err := p.c.ListLoadBalancers(ctx, cluster)
	if err != nil {
		return nil, sdkErr(err, "list load balancers")
	}
	out := make([]cloud.LoadBalancerRef, 0, len(list))
	for _, lb := range list {
		ref := cloud.LoadBalancerRef{Name: lb.Name, UID: types.UID(lb.Tags[TagServiceUID]), ClusterUID: types.UID(lb.Tags[TagClusterUID]),
			Class: lb.Tags[TagLoadBalancerClass]}
		if ns, name, ok := strings.Cut(lb.Tags[TagServiceName], "/"); ok {
			ref.Service = types.NamespacedName{Namespace: ns, Name: name}
		}
		out = append(out, ref)
	}
	return out, nil
}

// NotDeletableFor says why a load balancer with tags is not spec's to
// delete ("" when it may be): tagged with another Service UID or another
// cluster UID. A tag or a spec field that is empty (a load balancer made
// before the tag, a cluster UID unknown) proves nothing either way.
func NotDeletableFor(tags map[string]string, spec *cloud.LoadBalancerSpec) string {
	if uid := tags[TagServiceUID]; uid != "" && spec.UID != "" && uid != string(spec.UID) {
		return fmt.Sprintf("it is tagged for Service %s (uid %s), not uid %s", tags[TagServiceName], uid, spec.UID)
	}
	if uid := tags[TagClusterUID]; uid != "" && spec.ClusterUID != "" && uid != string(spec.ClusterUID) {
		return fmt.Sprintf("it is tagged for cluster uid %s, not %s", uid, spec.ClusterUID)
	}
	return ""
}
