package conformance

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// The dual-stack scenarios besides load-balancers/dual-stack, all gated on
// lb-dual-stack (the provider serves both families): node addresses of
// both families in the kubelet's order, routes of both families, ETP=Local
// per family, and the Service IP family policies as upstream defines them.
func dualStackTests() []Test {
	return []Test{
		{Name: "nodes/dual-stack-addresses", Needs: []Capability{Instances, LBDualStack}, Timeout: 4 * time.Minute, Run: testDualStackNodeAddresses},
		{Name: "routes/dual-stack", Needs: []Capability{Routes, LBDualStack}, Timeout: 4 * time.Minute, Run: testDualStackRoutes},
		{Name: "load-balancers/dual-stack-etp-local", Needs: []Capability{LoadBalancers, LBDualStack, LBHealthChecks}, Timeout: 10 * time.Minute, Run: testLBDualStackETPLocal},
		{Name: "load-balancers/ip-family-policies", Needs: []Capability{LoadBalancers, LBDualStack}, Timeout: 10 * time.Minute, Run: testLBIPFamilyPolicies},
	}
}

// testDualStackNodeAddresses: a kubelet with --node-ip=<v4>,<v6> (or
// <v6>,<v4>) and --cloud-provider=external leaves both in its
// provided-node-ip annotation; the CCM must make them the node's
// InternalIPs in that order (KEP-3705), so the first is the node's
// primary family as the kubelet chose it.
func testDualStackNodeAddresses(ctx context.Context, t *T) {
	for _, v6First := range []bool{false, true} {
		suffix := "dual4"
		if v6First {
			suffix = "dual6"
		}
		tn := newDualTestNode(ctx, t, suffix, v6First)
		n := tn.waitInitialized(ctx, t)
		t.Logf("node %s (provided-node-ip %s): addresses %v", n.Name, strings.Join(tn.ips, ","), n.Status.Addresses)
	}
}

// testDualStackRoutes: a dual-stack node gets a pod CIDR of each family
// (node IPAM with a cluster CIDR of each) and a route for each, with
// NetworkUnavailable=False; when the node goes, both routes go.
func testDualStackRoutes(ctx context.Context, t *T) {
	env := t.Env
	if env.Cloud == nil {
		t.Skipf("needs a node to add: run against the local cloud with --cloud-data-dir (or --cloud-endpoint)")
	}
	tn := newDualTestNode(ctx, t, "route6", false)
	tn.waitInitialized(ctx, t)
	var cidrs []string
	t.Eventually(ctx, routesTimeout, "a pod CIDR of each family for node "+tn.name, func(ctx context.Context) (bool, string) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, tn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cidrs = n.Spec.PodCIDRs
		ok, msg := dualStackVerdict(prefixAddrs(cidrs))
		return ok, fmt.Sprintf("spec.podCIDRs %v: %s (node IPAM needs a cluster CIDR of each family)", cidrs, msg)
	})
	t.Eventually(ctx, routesTimeout, "a route and NetworkUnavailable=False (RouteCreated) for every node's pod CIDRs", func(ctx context.Context) (bool, string) {
		problems, _, err := routeProblems(ctx, env)
		if err != nil {
			return false, err.Error()
		}
		return len(problems) == 0, strings.Join(problems, "; ")
	})
	t.Logf("node %s: pod CIDRs %v, a route for each", tn.name, cidrs)

	if err := env.Client.CoreV1().Nodes().Delete(ctx, tn.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete node %s: %v", tn.name, err)
	}
	t.Eventually(ctx, 2*time.Minute, "both routes of the deleted node "+tn.name+" gone", func(ctx context.Context) (bool, string) {
		rs, err := env.Cloud.ListRoutes(ctx, "")
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, r := range rs {
			if r.TargetNode == tn.name || slices.Contains(cidrs, r.DestinationCIDR) {
				left = append(left, r.DestinationCIDR+" → "+r.TargetNode)
			}
		}
		return len(left) == 0, fmt.Sprintf("routes left: %v", left)
	})
	t.Logf("node %s deleted: its routes of both families are gone", tn.name)
}

// prefixAddrs are the addresses of CIDRs ("" for one that does not parse,
// which dualStackVerdict then names).
func prefixAddrs(cidrs []string) []string {
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			out = append(out, c)
			continue
		}
		out = append(out, p.Addr().String())
	}
	return out
}

// testLBDualStackETPLocal: a RequireDualStack Service with
// externalTrafficPolicy Local and one pod. With the local cloud, the load
// balancer health-checks the health-check node port on each node's
// address of each family, and only the pod's node passes, in both. Where
// load balancers are reachable, each ingress is answered by the pod
// through its node alone, and the pod sees the client's own address of
// that family.
func testLBDualStackETPLocal(ctx context.Context, t *T) {
	const name = "lb-dual-etp-local"
	env := t.Env
	lbDeployment(ctx, t, name, 1)
	spec := lbServiceSpec(env, name)
	spec.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	spec.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	spec.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lbCreateService(ctx, t, spec)
	svc := lbWaitFamilies(ctx, t, name)
	ingress := lbIngressAddrs(svc)
	pods := lbWaitPods(ctx, t, name, 1)
	podName, node := pods[0].Name, pods[0].Spec.NodeName
	t.Logf("Service %s/%s: ingress %v, healthCheckNodePort %d; pod %s on node %s", env.Namespace, name, ingress, svc.Spec.HealthCheckNodePort, podName, node)
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Errorf("Service %s/%s with externalTrafficPolicy Local has no spec.healthCheckNodePort", env.Namespace, name)
	}
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, "a VIP of each family", func(lb *api.LoadBalancer) (bool, string) { return dualStackVerdict(lb.VIPs) })
		lbWaitHealth(ctx, t, lb.Name, fmt.Sprintf("to be node %s's address of each family, no other", node), func(h *api.LoadBalancerHealth) (bool, string) {
			return etpLocalFamiliesVerdict(h, node)
		})
	}
	if !lbReachable(t, "traffic of each family from the pod's node only, client address preserved") {
		return
	}
	for _, a := range ingress {
		hp := net.JoinHostPort(a, strconv.Itoa(lbPort))
		lbWaitLocalStreak(ctx, t, hp, podName, node)
		src, err := lbSourceAddr(hp)
		if err != nil {
			t.Fatalf("find the runner's source address towards %s: %v", hp, err)
		}
		ans, err := lbGet(ctx, hp, "/clientip")
		if err != nil {
			t.Fatalf("GET http://%s/clientip: %v", hp, err)
		}
		if seen, ok := lbClientIn(ans.Body); !ok || seen != src {
			t.Errorf("through %s with externalTrafficPolicy Local: the pod saw client %q, the runner connects from %s", hp, lbShort(ans.Body), src)
			continue
		}
		t.Logf("http://%s: 10 in a row answered by %s; the pod saw the runner's address %s", hp, podName, src)
	}
}

// etpLocalFamiliesVerdict: the healthy backends are exactly node's, one
// address of each family (both checked, neither draining).
func etpLocalFamiliesVerdict(h *api.LoadBalancerHealth, node string) (bool, string) {
	var healthy []string
	for _, b := range h.Backends {
		if b.Healthy && !b.Draining && !b.LastChecked.IsZero() {
			if b.Name != node {
				return false, fmt.Sprintf("backend %s (%s) is healthy but has no local endpoint; backends %s", b.Name, b.Address, lbDescribeHealth(h))
			}
			healthy = append(healthy, b.Address)
		}
	}
	if ok, msg := dualStackVerdict(healthy); !ok {
		return false, fmt.Sprintf("healthy addresses of node %s: %s; backends %s", node, msg, lbDescribeHealth(h))
	}
	return true, ""
}

// lbWaitFamilies waits until the Service's ingress has the families of
// its spec.ipFamilies, in order, and returns it.
func lbWaitFamilies(ctx context.Context, t *T, name string) *corev1.Service {
	env := t.Env
	var svc *corev1.Service
	t.Eventually(ctx, lbIngressTimeout, fmt.Sprintf("an ingress of each of Service %s/%s's ipFamilies", env.Namespace, name), func(ctx context.Context) (bool, string) {
		s, err := env.Client.CoreV1().Services(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "get Service: " + err.Error()
		}
		svc = s
		ok, msg := ingressFamiliesVerdict(lbIngressAddrs(s), s.Spec.IPFamilies)
		if !ok {
			msg += "; " + lbWhyNot(ctx, env, s)
		}
		return ok, msg
	})
	return svc
}

// ingressFamiliesVerdict: one ingress address per family of the Service's
// spec.ipFamilies and none of another, as upstream's dual-stack Services
// define it (a PreferDualStack Service in a single-stack cluster has one
// family, a SingleStack IPv6 Service only IPv6).
func ingressFamiliesVerdict(ingress []string, families []corev1.IPFamily) (bool, string) {
	if len(families) == 0 {
		return false, "spec.ipFamilies is empty (kube-apiserver has not set it)"
	}
	var got []corev1.IPFamily
	for _, s := range ingress {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			return false, fmt.Sprintf("ingress %q is not an IP address", s)
		case a.Unmap().Is4():
			got = append(got, corev1.IPv4Protocol)
		default:
			got = append(got, corev1.IPv6Protocol)
		}
	}
	want := slices.Clone(families)
	slices.Sort(want)
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !slices.Equal(sorted, want) {
		return false, fmt.Sprintf("ingress %v has families %v, want one of each of spec.ipFamilies %v", ingress, got, families)
	}
	return true, ""
}
