package service

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
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

// OfClass reports whether svc is in this controller's charge by class:
// without --load-balancer-class, Services without a class (as upstream);
// with it, exactly that class. Nothing outside it is ever touched.
func OfClass(svc *corev1.Service, class string) bool {
	if class == "" {
		return svc.Spec.LoadBalancerClass == nil
	}
	return svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == class
}

// WantsLoadBalancer reports whether this controller should provide a load
// balancer for svc: type LoadBalancer, of our class, not being deleted.
func WantsLoadBalancer(svc *corev1.Service, class string) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil && OfClass(svc, class)
}

// HasFinalizer reports whether svc carries the cleanup finalizer.
func HasFinalizer(svc *corev1.Service) bool {
	return slices.Contains(svc.Finalizers, FinalizerCleanup)
}

// Ownership is what this controller knows of who made a Service's load
// balancer. The cleanup finalizer is upstream's, shared by every
// implementation, so it alone proves nothing.
type Ownership int

const (
	// OwnershipUnknown: not seen making or declining it (e.g. after a restart).
	OwnershipUnknown Ownership = iota
	// OwnershipOurs: this controller added the finalizer or made the load balancer.
	OwnershipOurs
	// OwnershipOthers: seen as a LoadBalancer Service of another class.
	OwnershipOthers
)

// NeedsCleanup reports whether svc's load balancer is ours to delete now
// (then its status cleared and the finalizer removed). Only deletion or a
// type change away from LoadBalancer triggers cleanup, as upstream; and
// only for Services of our class. A type change clears the class (the
// apiserver drops it), so a former LoadBalancer Service is cleaned up when
// we know we made its load balancer, or when we serve class-less Services
// and nobody else is known to have (upstream's behaviour). With
// --load-balancer-class and nothing known (after a restart), orphan
// collection proves it from the cloud's tags and queues it again.
func NeedsCleanup(svc *corev1.Service, class string, owner Ownership) bool {
	if !HasFinalizer(svc) {
		return false
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		return svc.DeletionTimestamp != nil && OfClass(svc, class)
	}
	switch owner {
	case OwnershipOurs:
		return true
	case OwnershipOthers:
		return false
	default:
		return class == "" && svc.Spec.LoadBalancerClass == nil
	}
}

// EligibleNode is upstream's stable node-set predicate, less the cluster
// autoscaler's taint: not being deleted, not excluded by label (an
// unparsable value excludes). Readiness is deliberately not used
// (KEP-3458): load-balancer health checks handle it without a cloud call.
// A node tainted ToBeDeletedByClusterAutoscaler stays a backend until it is
// deleted: kube-proxy's health check fails for it (KEP-3836), so the load
// balancer drains it instead of cutting its connections at once.
func EligibleNode(n *corev1.Node) bool {
	if n.DeletionTimestamp != nil {
		return false
	}
	if v, ok := n.Labels[LabelExcludeFromLB]; ok {
		if excluded, err := strconv.ParseBool(v); err != nil || excluded {
			return false
		}
	}
	return true
}

// HostSetChanged reports whether a node update can change the load
// balancers' host sets (as upstream's shouldSyncUpdatedNode): eligibility,
// providerID, or the addresses as a set (order is not a change).
func HostSetChanged(old, n *corev1.Node) bool {
	return EligibleNode(old) != EligibleNode(n) || old.Spec.ProviderID != n.Spec.ProviderID ||
		!sameAddresses(old.Status.Addresses, n.Status.Addresses)
}

func sameAddresses(a, b []corev1.NodeAddress) bool {
	if len(a) != len(b) {
		return false
	}
	return slices.Equal(sortedAddresses(a), sortedAddresses(b))
}

func sortedAddresses(as []corev1.NodeAddress) []corev1.NodeAddress {
	out := slices.Clone(as)
	slices.SortFunc(out, func(x, y corev1.NodeAddress) int {
		if c := strings.Compare(string(x.Type), string(y.Type)); c != 0 {
			return c
		}
		return strings.Compare(x.Address, y.Address)
	})
	return out
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
// load balancer's backends are node addresses), in any order.
func HostsHash(hosts []cloud.Host) string {
	h := sha256.New()
	for _, host := range hosts {
		fmt.Fprintf(h, "%s|%s|", host.Name, host.ProviderID)
		for _, a := range sortedAddresses(host.Addresses) {
			fmt.Fprintf(h, "%s=%s,", a.Type, a.Address)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SpecHash identifies what of a Service its load balancer may depend on:
// the validated spec, the whole Service spec (every field upstream
// re-syncs on, targetPort, appProtocol, sessionAffinityConfig, externalIPs,
// ipFamilyPolicy..., reaches the provider when it changes) and the
// annotations (providers read their own).
func SpecHash(spec *cloud.LoadBalancerSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%s|%v|%v|%v|%v|%s|%v\n", spec.Cluster, spec.ClusterUID, spec.Name, spec.UID, spec.Ports, spec.SourceRanges,
		spec.HealthCheck, spec.IPFamilies, spec.RequestedIP, spec.ClientIPAffinity)
	if spec.Object != nil {
		raw, _ := json.Marshal(spec.Object.Spec)
		h.Write(raw)
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

// StatusEqual compares load-balancer statuses; the order of the ingress
// entries is not a change.
func StatusEqual(a, b *corev1.LoadBalancerStatus) bool {
	return equality.Semantic.DeepEqual(sortedIngress(a.Ingress), sortedIngress(b.Ingress))
}

func sortedIngress(in []corev1.LoadBalancerIngress) []corev1.LoadBalancerIngress {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(x, y corev1.LoadBalancerIngress) int {
		if c := strings.Compare(x.IP, y.IP); c != 0 {
			return c
		}
		return strings.Compare(x.Hostname, y.Hostname)
	})
	return out
}

// UsableStatus reports why an EnsureLoadBalancer result cannot be recorded
// as ready, or "": a provider returning no status or no ingress has not
// provisioned the load balancer yet, and is asked again.
func UsableStatus(st *corev1.LoadBalancerStatus) string {
	if st == nil {
		return "the cloud provider returned no load-balancer status"
	}
	if len(st.Ingress) == 0 {
		return "the cloud provider returned a load-balancer status without ingress"
	}
	return ""
}

func serviceKey(namespace, name string) string { return namespace + "/" + name }

func splitKey(key string) (string, string) {
	ns, name, _ := strings.Cut(key, "/")
	return ns, name
}

// HostChanges is what turns the host set from into to: hosts of from not
// in to, or in to as another target (another instance or other
// addresses), are removed; hosts of to not in from, or changed in any way,
// are added. A host changed only in its labels is added, not removed: the
// cloud updates it in place (adding a host it has is an update), where a
// removal would drain its connections and restart its health checks for a
// node that never stopped serving (a `kubectl label node` followed by any
// node joining did that to every relabeled node). Hosts are identified by
// name; the result follows to's and from's order.
func HostChanges(from, to []cloud.Host) (add, remove []cloud.Host) {
	next := make(map[string]*cloud.Host, len(to))
	for i := range to {
		next[to[i].Name] = &to[i]
	}
	old := make(map[string]*cloud.Host, len(from))
	for i := range from {
		h := &from[i]
		old[h.Name] = h
		if n, ok := next[h.Name]; !ok || !sameTarget(h, n) {
			remove = append(remove, *h)
		}
	}
	for i := range to {
		h := &to[i]
		if o, ok := old[h.Name]; !ok || !sameHost(o, h) {
			add = append(add, *h)
		}
	}
	return add, remove
}

// SharedAddress returns an IP address (InternalIP or ExternalIP) that two
// hosts of the set share, or "" when each is one host's. It happens when
// the cloud gives a deleted instance's address to a new instance before
// the old Node is deleted: for a while both Nodes are hosts. A provider
// that keys backends by address (the local cloud, IP target groups) then
// holds one backend for both, which a difference cannot describe: adding
// the new host only renames that backend, and removing the old host later
// removes it, leaving the new host out of the load balancer while the
// controller believes it in. HostChanges is only sent as a difference
// between two sets that have no shared address; else the whole set is.
func SharedAddress(hosts []cloud.Host) string {
	owner := make(map[string]string, len(hosts))
	for _, h := range hosts {
		for _, a := range h.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if o, ok := owner[a.Address]; ok && o != h.Name {
				return a.Address
			}
			owner[a.Address] = h.Name
		}
	}
	return ""
}

// sameTarget reports whether a and b are the same backend to a cloud: the
// same instance at the same addresses in the same order (a provider may
// use a host's first address of a family: a reorder can change it).
func sameTarget(a, b *cloud.Host) bool {
	return a.ProviderID == b.ProviderID && slices.Equal(a.Addresses, b.Addresses)
}

func sameHost(a, b *cloud.Host) bool {
	return sameTarget(a, b) && maps.Equal(a.Labels, b.Labels)
}
