package nodesim

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Endpoint is one ready backend of a Service port, as kube-proxy sees it
// in the Service's EndpointSlices.
type Endpoint struct {
	// Pod is "namespace/name" of the endpoint's targetRef (or its address
	// when it names no pod).
	Pod  string
	Node string
	IP   string
}

// ReadyEndpoints are the endpoints serving port of a Service, from its
// EndpointSlices: those of a slice that carries the port (by name and
// protocol) whose ready condition is true or unset, as kube-proxy reads
// them (an unset condition means ready). FQDN slices are skipped.
func ReadyEndpoints(slices []*discoveryv1.EndpointSlice, port corev1.ServicePort) []Endpoint {
	var out []Endpoint
	seen := map[string]bool{}
	for _, s := range slices {
		if s.AddressType == discoveryv1.AddressTypeFQDN || !slicePort(s, port) {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready || len(e.Addresses) == 0 {
				continue
			}
			ep := Endpoint{IP: e.Addresses[0], Pod: e.Addresses[0]}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				ep.Pod = e.TargetRef.Namespace + "/" + e.TargetRef.Name
			}
			// A pod in two slices (an update splitting or merging them) counts once.
			if key := ep.IP + "|" + ep.Pod; !seen[key] {
				seen[key] = true
				out = append(out, ep)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// slicePort reports whether a slice carries port: same name (both may be
// empty for a single unnamed port) and protocol (unset means TCP).
func slicePort(s *discoveryv1.EndpointSlice, port corev1.ServicePort) bool {
	proto := port.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, p := range s.Ports {
		name, pp := "", corev1.ProtocolTCP
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if name == port.Name && pp == proto {
			return true
		}
	}
	return false
}

// NodePortTargets are the endpoints a NodePort on node forwards to: all
// ready ones, or for externalTrafficPolicy=Local only those on node (kube-
// proxy drops external traffic for a Local Service on a node without one).
// None means the NodePort does not answer.
func NodePortTargets(svc *corev1.Service, eps []Endpoint, node string) []Endpoint {
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return eps
	}
	return LocalEndpoints(eps, node)
}

// LocalEndpoints are the endpoints on node: what kube-proxy's health-check
// node port counts for an externalTrafficPolicy=Local Service (200 when
// there is one, 503 otherwise).
func LocalEndpoints(eps []Endpoint, node string) []Endpoint {
	var out []Endpoint
	for _, e := range eps {
		if e.Node == node {
			out = append(out, e)
		}
	}
	return out
}
