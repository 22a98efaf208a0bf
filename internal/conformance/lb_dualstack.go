package conformance

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// testLBDualStack: a RequireDualStack LoadBalancer Service (IPv4 and IPv6,
// as upstream's dual-stack Services are) gets one ingress of each family;
// with the local cloud, its load balancer has a VIP of each; and, where
// the runner reaches load balancers, each ingress is answered by the
// Service's pods. It needs a dual-stack cluster (Service ranges of both
// families) besides the provider's lb-dual-stack.
func testLBDualStack(ctx context.Context, t *T) {
	const name = "lb-dual-stack"
	env := t.Env
	lbDeployment(ctx, t, name, 2)
	svc := lbServiceSpec(env, name)
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	lbCreateService(ctx, t, svc)
	var cur *corev1.Service
	t.Eventually(ctx, lbIngressTimeout, fmt.Sprintf("an ingress of each family on Service %s/%s", env.Namespace, name), func(ctx context.Context) (bool, string) {
		s, err := env.Client.CoreV1().Services(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "get Service: " + err.Error()
		}
		cur = s
		ok, msg := dualStackVerdict(lbIngressAddrs(s))
		if !ok {
			msg += "; " + lbWhyNot(ctx, env, s)
		}
		return ok, msg
	})
	ingress := lbIngressAddrs(cur)
	t.Logf("Service %s/%s: clusterIPs %v, ingress %v", env.Namespace, name, cur.Spec.ClusterIPs, ingress)
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, cur, 30*time.Second, "has a VIP of each family, the ingress",
			func(lb *api.LoadBalancer) (bool, string) {
				if ok, msg := dualStackVerdict(lb.VIPs); !ok {
					return false, msg
				}
				for _, a := range ingress {
					if !slices.Contains(lb.VIPs, a) {
						return false, fmt.Sprintf("ingress %s is not a VIP of %v", a, lb.VIPs)
					}
				}
				return true, ""
			})
		t.Logf("local cloud: load balancer %s, VIPs %v", lb.Name, lb.VIPs)
	}
	if !lbReachable(t, "HTTP through the ingress of each family") {
		return
	}
	pods := lbPodNames(lbWaitPods(ctx, t, name, 2))
	for _, a := range ingress {
		hp := net.JoinHostPort(a, strconv.Itoa(lbPort))
		ans := lbWaitServed(ctx, t, hp, "/hostname", pods)
		t.Logf("GET http://%s/hostname → %q", hp, lbShort(ans.Body))
	}
}

// dualStackVerdict says whether addrs hold exactly one address of each
// family, and what is wrong when not.
func dualStackVerdict(addrs []string) (bool, string) {
	v4, v6 := 0, 0
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			return false, fmt.Sprintf("%q is not an IP address", s)
		case a.Is4() || a.Is4In6():
			v4++
		default:
			v6++
		}
	}
	if v4 != 1 || v6 != 1 {
		return false, fmt.Sprintf("%v: %d IPv4 and %d IPv6, want one of each", addrs, v4, v6)
	}
	return true, ""
}
