package console

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
	"github.com/portside-io/portside/internal/controllers/service"
	"github.com/portside-io/portside/pkg/providers/local"
)

// ClusterState is the cluster side: LoadBalancer Services joined with the
// cloud's load balancers, and the nodes.
type ClusterState struct {
	Connected bool          `json:"connected"`
	Error     string        `json:"error,omitempty"`
	Services  []ServiceView `json:"services"`
	Nodes     []NodeView    `json:"nodes"`
}

// ServiceView is one LoadBalancer Service and what serves it.
type ServiceView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Class     string `json:"class,omitempty"`
	// LoadBalancer is the cloud load balancer serving it, "" if none.
	LoadBalancer string        `json:"loadBalancer,omitempty"`
	Ingress      []string      `json:"ingress"`
	Ports        []string      `json:"ports"`
	Status       string        `json:"status"`
	Backends     []BackendView `json:"backends"`
	Pods         []PodView     `json:"pods"`
}

// BackendView is a node behind a Service's load balancer.
type BackendView struct {
	Node     string `json:"node"`
	Address  string `json:"address"`
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining,omitempty"`
	Error    string `json:"error,omitempty"`
	Conns    int64  `json:"conns"`
}

// PodView is an endpoint of a Service.
type PodView struct {
	Name  string `json:"name"`
	Node  string `json:"node,omitempty"`
	IP    string `json:"ip"`
	Ready bool   `json:"ready"`
}

// NodeView is a node as the cloud controller manager sees it.
type NodeView struct {
	Name         string   `json:"name"`
	ProviderID   string   `json:"providerID,omitempty"`
	Zone         string   `json:"zone,omitempty"`
	Region       string   `json:"region,omitempty"`
	InstanceType string   `json:"instanceType,omitempty"`
	PodCIDRs     []string `json:"podCIDRs,omitempty"`
	Addresses    []string `json:"addresses,omitempty"`
	Ready        bool     `json:"ready"`
	Initialized  bool     `json:"initialized"`
	// Why says why the node is not initialized, or what else is notable
	// (shut down, excluded from load balancers).
	Why string `json:"why,omitempty"`
}

func buildClusterState(svcs []*corev1.Service, nodes []*corev1.Node, eps []*discoveryv1.EndpointSlice, lbs []LoadBalancer) ClusterState {
	st := ClusterState{Connected: true, Services: []ServiceView{}, Nodes: []NodeView{}}
	for _, n := range nodes {
		st.Nodes = append(st.Nodes, nodeView(n))
	}
	slices.SortFunc(st.Nodes, func(a, b NodeView) int { return cmp.Compare(a.Name, b.Name) })
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			bySvc[s.Namespace+"/"+name] = append(bySvc[s.Namespace+"/"+name], s)
		}
	}
	for _, svc := range svcs {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		st.Services = append(st.Services, serviceView(svc, bySvc[svc.Namespace+"/"+svc.Name], lbs))
	}
	slices.SortFunc(st.Services, func(a, b ServiceView) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return st
}

func serviceView(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, lbs []LoadBalancer) ServiceView {
	v := ServiceView{Namespace: svc.Namespace, Name: svc.Name, Ingress: []string{}, Ports: []string{}, Backends: []BackendView{}, Pods: []PodView{}}
	if svc.Spec.LoadBalancerClass != nil {
		v.Class = *svc.Spec.LoadBalancerClass
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		v.Ingress = append(v.Ingress, cmp.Or(in.IP, in.Hostname))
	}
	for _, p := range svc.Spec.Ports {
		v.Ports = append(v.Ports, fmt.Sprintf("%d/%s→%d", p.Port, p.Protocol, p.NodePort))
	}
	if lb := matchLoadBalancer(svc, lbs); lb != nil {
		v.LoadBalancer = lb.Name
		for _, b := range lb.Health.Backends {
			v.Backends = append(v.Backends, BackendView{Node: b.Name, Address: b.Address, Healthy: b.Healthy,
				Draining: b.Draining, Error: b.LastError, Conns: b.ActiveConns})
		}
	}
	for _, s := range eps {
		for _, e := range s.Endpoints {
			p := PodView{Ready: e.Conditions.Ready == nil || *e.Conditions.Ready}
			if e.TargetRef != nil {
				p.Name = e.TargetRef.Name
			}
			if e.NodeName != nil {
				p.Node = *e.NodeName
			}
			if len(e.Addresses) > 0 {
				p.IP = e.Addresses[0]
			}
			if !slices.ContainsFunc(v.Pods, func(q PodView) bool { return q.Name == p.Name && q.IP == p.IP }) {
				v.Pods = append(v.Pods, p)
			}
		}
	}
	slices.SortFunc(v.Pods, func(a, b PodView) int { return cmp.Compare(a.Name, b.Name) })
	v.Status = serviceStatus(svc, v)
	return v
}

// matchLoadBalancer finds the load balancer made for svc: by the local
// provider's tags (name and UID, so a same-named Service of another
// cluster does not match), else by a VIP in the Service's ingress (a CCM
// that does not tag, e.g. upstream's with another provider).
func matchLoadBalancer(svc *corev1.Service, lbs []LoadBalancer) *LoadBalancer {
	for i := range lbs {
		t := lbs[i].Tags
		if t[local.TagServiceName] == svc.Namespace+"/"+svc.Name && t[local.TagServiceUID] == string(svc.UID) {
			return &lbs[i]
		}
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		for i := range lbs {
			if in.IP != "" && slices.Contains(lbs[i].VIPs, in.IP) {
				return &lbs[i]
			}
		}
	}
	return nil
}

// serviceStatus is the one-line state of a Service's load balancer.
func serviceStatus(svc *corev1.Service, v ServiceView) string {
	healthy := 0
	for _, b := range v.Backends {
		if b.Healthy {
			healthy++
		}
	}
	switch {
	case v.Class != "" && v.LoadBalancer == "":
		return "class " + v.Class + ": served by another controller"
	case v.LoadBalancer == "" && len(v.Ingress) == 0:
		for _, c := range svc.Status.Conditions {
			if c.Type == "LoadBalancerReady" && c.Status == "False" {
				return "pending: " + c.Message
			}
		}
		return "pending: no load balancer yet"
	case v.LoadBalancer == "":
		return "ingress set, but no load balancer in this cloud has its address"
	case len(v.Ingress) == 0:
		return "load balancer exists, ingress not yet written"
	case len(v.Backends) == 0:
		return "no backends"
	case healthy == 0:
		return "serving nothing: no healthy backend"
	}
	return fmt.Sprintf("serving: %d/%d backends healthy", healthy, len(v.Backends))
}

func nodeView(n *corev1.Node) NodeView {
	v := NodeView{Name: n.Name, ProviderID: n.Spec.ProviderID, Zone: n.Labels[corev1.LabelTopologyZone], Region: n.Labels[corev1.LabelTopologyRegion],
		InstanceType: n.Labels[corev1.LabelInstanceTypeStable], PodCIDRs: n.Spec.PodCIDRs}
	if len(v.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		v.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	for _, a := range n.Status.Addresses {
		v.Addresses = append(v.Addresses, string(a.Type)+" "+a.Address)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			v.Ready = c.Status == corev1.ConditionTrue
		}
	}
	v.Initialized, v.Why = nodeStatus(n)
	return v
}

// nodeStatus says whether the cloud controller manager initialized the
// node and, if not, why; for initialized nodes it notes what affects load
// balancing.
func nodeStatus(n *corev1.Node) (bool, string) {
	var notes []string
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case node.TaintUninitialized:
			return false, "waiting for the cloud controller manager (" + node.TaintUninitialized + " taint)"
		case nodelifecycle.TaintShutdown:
			notes = append(notes, "instance shut down")
		}
	}
	if n.Spec.ProviderID == "" {
		return false, "no providerID: not initialized by a cloud controller manager"
	}
	if n.DeletionTimestamp == nil && !service.EligibleNode(n) {
		notes = append(notes, "excluded from load balancers")
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue {
			notes = append(notes, "no route yet ("+c.Reason+")")
		}
	}
	return true, strings.Join(notes, "; ")
}
