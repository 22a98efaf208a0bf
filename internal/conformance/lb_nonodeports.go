package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// testLBWithoutNodePorts is upstream's "should be able to create
// LoadBalancer Service without NodePort and change it", stronger: a
// Service with allocateLoadBalancerNodePorts false gets an ingress and no
// NodePort, its pods answer through the ingress, a port it lacks is
// refused (not left to time out), and NodePorts allocated later keep the
// same ingress, still answered. With the local cloud, the load balancer
// has no backend port while routed and the NodePort after.
func testLBWithoutNodePorts(ctx context.Context, t *T) {
	const name = "lb-no-nodeports"
	env := t.Env
	lbDeployment(ctx, t, name, 2)
	spec := lbServiceSpec(env, name)
	spec.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
	lbCreateService(ctx, t, spec)
	svc, addr := lbWaitIngress(ctx, t, name)
	if np := svc.Spec.Ports[0].NodePort; np != 0 {
		t.Errorf("Service %s/%s with allocateLoadBalancerNodePorts false has NodePort %d", env.Namespace, name, np)
	}
	ingress := lbIngressAddrs(svc)
	if env.Cloud != nil {
		lbWaitCloud(ctx, t, svc, 30*time.Second, "has a listener per Service port without a backend port",
			func(lb *api.LoadBalancer) (bool, string) {
				l, ok := lbListener(lb, corev1.ProtocolTCP, lbPort)
				if !ok {
					return false, "no listener for TCP " + strconv.Itoa(lbPort)
				}
				return l.BackendPort == 0, fmt.Sprintf("listener TCP %d forwards to backend port %d", lbPort, l.BackendPort)
			})
	}
	pods := lbPodNames(lbWaitPods(ctx, t, name, 2))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	if lbReachable(t, "HTTP through the ingress of a Service without NodePorts, and a refused port") {
		lbWaitServed(ctx, t, hp, "/hostname", pods)
		other := net.JoinHostPort(addr, strconv.Itoa(lbPort+1))
		if err := lbRefused(other); err != nil {
			t.Errorf("a port Service %s/%s does not have (%s): %v", env.Namespace, name, other, err)
		}
	}

	svc = lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptr.To(true) })
	np := svc.Spec.Ports[0].NodePort
	if np == 0 {
		t.Errorf("Service %s/%s: no NodePort allocated after allocateLoadBalancerNodePorts true", env.Namespace, name)
	}
	if now := lbuIngressNow(ctx, t, name); fmt.Sprint(now) != fmt.Sprint(ingress) {
		t.Errorf("Service %s/%s: ingress changed from %v to %v when NodePorts were allocated", env.Namespace, name, ingress, now)
	}
	if env.Cloud != nil && np != 0 {
		lbWaitCloud(ctx, t, svc, 30*time.Second, "forwards to the new NodePort",
			func(lb *api.LoadBalancer) (bool, string) { msg := lbCheckListeners(lb, svc); return msg == "", msg })
	}
	if lbReachable(t, "HTTP through the same ingress with NodePorts") {
		lbWaitServed(ctx, t, hp, "/hostname", pods)
	}
}

// lbRefused is nil when a TCP connection to hostPort is refused within 3 s.
func lbRefused(hostPort string) error {
	c, err := net.DialTimeout("tcp", hostPort, 3*time.Second)
	if err == nil {
		_ = c.Close()
		return errors.New("connection accepted, want refused")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%v, want connection refused", err)
	}
	return nil
}
