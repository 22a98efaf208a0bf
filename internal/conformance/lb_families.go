package conformance

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// testLBIPFamilyPolicies: Services of each IP family policy get load
// balancers of their families, as upstream defines the policies: a
// PreferDualStack Service one ingress per family it was given (both in a
// dual-stack cluster), a SingleStack IPv6 Service one IPv6 ingress; a
// dual-stack Service changed to SingleStack loses its secondary family
// (kube-apiserver drops the ClusterIP, the provider the VIP) and changed
// back to RequireDualStack gets it again. With the local cloud the load
// balancer's VIPs follow; where load balancers are reachable each ingress
// is answered by the pods.
func testLBIPFamilyPolicies(ctx context.Context, t *T) {
	const app = "lb-families"
	env := t.Env
	lbDeployment(ctx, t, app, 2)
	pods := lbPodNames(lbWaitPods(ctx, t, app, 2))
	create := func(name string, policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) {
		s := lbServiceSpec(env, name)
		s.Spec.Selector = map[string]string{"app": app}
		s.Spec.IPFamilyPolicy = ptr.To(policy)
		s.Spec.IPFamilies = families
		lbCreateService(ctx, t, s)
	}
	// check waits for ingress of the Service's families, the cloud's VIPs
	// to be those, and each ingress answered.
	check := func(name, what string) *corev1.Service {
		svc := lbWaitFamilies(ctx, t, name)
		ingress := lbIngressAddrs(svc)
		t.Logf("%s: Service %s/%s policy %s, ipFamilies %v, clusterIPs %v, ingress %v", what, env.Namespace, name,
			ptr.Deref(svc.Spec.IPFamilyPolicy, ""), svc.Spec.IPFamilies, svc.Spec.ClusterIPs, ingress)
		if env.Cloud != nil {
			lbWaitCloud(ctx, t, svc, 30*time.Second, fmt.Sprintf("VIPs %v (the ingress)", ingress), func(lb *api.LoadBalancer) (bool, string) {
				return sameAddrs(lb.VIPs, ingress), fmt.Sprintf("VIPs %v", lb.VIPs)
			})
		}
		if lbReachable(t, "HTTP through "+name+"'s ingress") {
			for _, a := range ingress {
				hp := net.JoinHostPort(a, strconv.Itoa(lbPort))
				ans := lbWaitServed(ctx, t, hp, "/hostname", pods)
				t.Logf("GET http://%s/hostname → %q", hp, lbShort(ans.Body))
			}
		}
		return svc
	}

	create("lb-prefer-dual", corev1.IPFamilyPolicyPreferDualStack)
	svc := check("lb-prefer-dual", "PreferDualStack")
	create("lb-ipv6", corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)
	check("lb-ipv6", "SingleStack IPv6")
	if len(svc.Spec.IPFamilies) != 2 {
		// kube-apiserver refuses RequireDualStack there.
		t.Logf("the cluster is single-stack (PreferDualStack got %v): the change between dual- and single-stack is not checked", svc.Spec.IPFamilies)
		return
	}

	create("lb-downgrade", corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)
	before := check("lb-downgrade", "RequireDualStack")
	lbUpdateService(ctx, t, "lb-downgrade", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies, s.Spec.ClusterIPs = s.Spec.IPFamilies[:1], s.Spec.ClusterIPs[:1]
	})
	after := check("lb-downgrade", "changed to SingleStack")
	if len(after.Spec.IPFamilies) != 1 || after.Spec.IPFamilies[0] != before.Spec.IPFamilies[0] {
		t.Errorf("changed to SingleStack: ipFamilies %v, want [%s] (the primary family kept)", after.Spec.IPFamilies, before.Spec.IPFamilies[0])
	}
	lbUpdateService(ctx, t, "lb-downgrade", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	})
	check("lb-downgrade", "changed back to RequireDualStack")
}

// sameAddrs: a and b hold the same addresses, in any order.
func sameAddrs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s] == 0 {
			return false
		}
		seen[s]--
	}
	return true
}
