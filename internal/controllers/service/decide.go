package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/portside-io/portside/pkg/cloud"
)

// Well-known names (k8s.io/cloud-provider and k8s.io/api).
const (
	FinalizerCleanup     = "service.kubernetes.io/load-balancer-cleanup"
	LabelExcludeFromLB   = "node.kubernetes.io/exclude-from-external-load-balancers"
	TaintToBeDeletedByCA = "ToBeDeletedByClusterAutoscaler"
	// ConditionLoadBalancerReady is the Service condition Portside keeps:
	// True once the load balancer serves, False with the reason when it
	// cannot be made.
	ConditionLoadBalancerReady = "LoadBalancerReady"
)

// WantsLoadBalancer reports whether this controller should provide a load
// balancer for svc: type LoadBalancer and no class, or, when class is set
// (--load-balancer-class), exactly that class.
func WantsLoadBalancer(svc *corev1.Service, class string) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		return false
	}
	if class == "" {
		return svc.Spec.LoadBalancerClass == nil
	}
	return svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == class
}

// HasFinalizer reports whether svc carries the cleanup finalizer.
func HasFinalizer(svc *corev1.Service) bool {
	return slices.Contains(svc.Finalizers, FinalizerCleanup)
}

// NeedsCleanup reports whether svc has a load balancer of ours to delete:
// our finalizer is on it, and it is being deleted or no longer wants one.
func NeedsCleanup(svc *corev1.Service, class string) bool {
	return HasFinalizer(svc) && !WantsLoadBalancer(svc, class)
}

// EligibleNode is upstream's stable node-set predicate: not being deleted,
// not excluded by label (an unparsable value excludes), not tainted for
// deletion by the cluster autoscaler. Readiness is deliberately not used
// (KEP-3458): load-balancer health checks handle it without a cloud call.
func EligibleNode(n *corev1.Node) bool {
	if n.DeletionTimestamp != nil {
		return false
	}
	if v, ok := n.Labels[LabelExcludeFromLB]; ok {
		if excluded, err := strconv.ParseBool(v); err != nil || excluded {
			return false
		}
	}
	return !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintToBeDeletedByCA })
}

// Hosts returns the load-balancer hosts among nodes, sorted by name.
func Hosts(nodes []*corev1.Node) []cloud.Host {
	hosts := make([]cloud.Host, 0, len(nodes))
	for _, n := range nodes {
		if EligibleNode(n) {
			hosts = append(hosts, cloud.Host(cloud.NodeFrom(n)))
		}
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Name < hosts[j].Name })
	return hosts
}

// HostsHash identifies a host set: names, providerIDs and addresses (the
// load balancer's backends are node addresses).
func HostsHash(hosts []cloud.Host) string {
	h := sha256.New()
	for _, host := range hosts {
		fmt.Fprintf(h, "%s|%s|", host.Name, host.ProviderID)
		for _, a := range host.Addresses {
			fmt.Fprintf(h, "%s=%s,", a.Type, a.Address)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SpecHash identifies what of a Service its load balancer depends on: the
// validated spec and the annotations (providers read their own).
func SpecHash(spec *cloud.LoadBalancerSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%v|%v|%v|%v|%s|%v\n", spec.Cluster, spec.Name, spec.UID, spec.Ports, spec.SourceRanges,
		spec.HealthCheck, spec.IPFamilies, spec.RequestedIP, spec.ClientIPAffinity)
	if spec.Object != nil {
		keys := make([]string, 0, len(spec.Object.Annotations))
		for k := range spec.Object.Annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(h, "%s=%s\n", k, spec.Object.Annotations[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Unsupported returns why the provider cannot make this load balancer, or "".
func Unsupported(spec *cloud.LoadBalancerSpec, f cloud.LoadBalancerFeatures) string {
	protos := map[corev1.Protocol]bool{}
	for _, p := range spec.Ports {
		protos[p.Protocol] = true
		if !f.SupportsProtocol(p.Protocol) {
			return fmt.Sprintf("port %d uses protocol %s, which this cloud's load balancers do not support (supported: %v)", p.Port, p.Protocol, f.Protocols)
		}
	}
	if len(protos) > 1 && !f.MixedProtocols {
		return "the Service mixes protocols, which this cloud's load balancers do not support: use one Service per protocol"
	}
	if len(spec.SourceRanges) > 0 && !f.SourceRanges {
		return "loadBalancerSourceRanges are set, but this cloud's load balancers cannot enforce them"
	}
	if len(spec.IPFamilies) > 1 && !f.DualStack {
		return "the Service is dual-stack, but this cloud's load balancers are single-stack: set ipFamilyPolicy SingleStack"
	}
	if spec.HealthCheck != nil && !f.HealthChecks {
		return "externalTrafficPolicy is Local, but this cloud's load balancers cannot health-check nodes: use Cluster"
	}
	return ""
}

// statusEqual compares load-balancer statuses.
func statusEqual(a, b *corev1.LoadBalancerStatus) bool {
	return equality.Semantic.DeepEqual(a.Ingress, b.Ingress)
}

func serviceKey(namespace, name string) string { return namespace + "/" + name }

func splitKey(key string) (string, string) {
	ns, name, _ := strings.Cut(key, "/")
	return ns, name
}
