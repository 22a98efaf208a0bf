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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// LoadBalancerTests are the scenarios of LoadBalancer Services: ingress,
// traffic, protocols, source ranges, externalTrafficPolicy=Local, node
// changes, classes and deletion. Every check is made on the Service and
// through its ingress; with the local cloud's API (env.Cloud) the load
// balancer's listeners, backends and their health are checked too.
func LoadBalancerTests() []Test {
	return []Test{
		{Name: "load-balancers/ingress-and-traffic", Needs: []Capability{LoadBalancers}, Timeout: 8 * time.Minute, Run: testLBIngressAndTraffic},
		{Name: "load-balancers/udp", Needs: []Capability{LoadBalancers, LBUDP}, Timeout: 8 * time.Minute, Run: testLBUDP},
		{Name: "load-balancers/mixed-protocols", Needs: []Capability{LoadBalancers, LBMixedProtocols}, Timeout: 8 * time.Minute, Run: testLBMixedProtocols},
		{Name: "load-balancers/source-ranges", Needs: []Capability{LoadBalancers, LBSourceRanges, LBReachable}, Timeout: 12 * time.Minute, Run: testLBSourceRanges},
		{Name: "load-balancers/etp-local", Needs: []Capability{LoadBalancers, LBHealthChecks}, Timeout: 10 * time.Minute, Run: testLBETPLocal},
		{Name: "load-balancers/node-changes", Needs: []Capability{LoadBalancers}, Timeout: 6 * time.Minute, Run: testLBNodeChanges},
		{Name: "load-balancers/class-ignored", Needs: []Capability{LoadBalancers}, Timeout: 2 * time.Minute, Run: testLBClassIgnored},
		{Name: "load-balancers/deletion", Needs: []Capability{LoadBalancers}, Timeout: 6 * time.Minute, Run: testLBDeletion},
		{Name: "load-balancers/without-node-ports", Needs: []Capability{LoadBalancers, LBWithoutNodePorts}, Timeout: 8 * time.Minute, Run: testLBWithoutNodePorts},
		{Name: "load-balancers/ip-mode", Needs: []Capability{LoadBalancers, LBIPMode}, Timeout: 4 * time.Minute, Run: testLBIPMode},
		// Upstream's LoadBalancer e2e scenarios (lb_upstream.go).
		{Name: "load-balancers/type-changes-tcp", Needs: []Capability{LoadBalancers}, Timeout: 10 * time.Minute, Run: testLBTypeChanges(corev1.ProtocolTCP)},
		{Name: "load-balancers/type-changes-udp", Needs: []Capability{LoadBalancers, LBUDP}, Timeout: 10 * time.Minute, Run: testLBTypeChanges(corev1.ProtocolUDP)},
		{Name: "load-balancers/session-affinity", Needs: []Capability{LoadBalancers, LBReachable}, Timeout: 8 * time.Minute, Run: testLBSessionAffinity},
		{Name: "load-balancers/udp-pod-cycles", Needs: []Capability{LoadBalancers, LBUDP, LBReachable}, Timeout: 8 * time.Minute, Run: testLBUDPPodCycles},
		{Name: "load-balancers/rolling-update", Needs: []Capability{LoadBalancers, LBReachable}, Timeout: 10 * time.Minute, Run: testLBRollingUpdate},
		{Name: "load-balancers/etp-local-endpoints", Needs: []Capability{LoadBalancers, LBHealthChecks}, Timeout: 10 * time.Minute, Run: testLBETPLocalEndpoints},
		{Name: "load-balancers/etp-local-from-pods", Needs: []Capability{LoadBalancers, LBHealthChecks}, Timeout: 8 * time.Minute, Run: testLBETPLocalFromPods},
		{Name: "load-balancers/dual-stack", Needs: []Capability{LoadBalancers, LBDualStack}, Timeout: 8 * time.Minute, Run: testLBDualStack},
		{Name: "load-balancers/same-port-protocols", Needs: []Capability{LoadBalancers, LBMixedProtocols}, Timeout: 8 * time.Minute, Run: testLBSamePortProtocols},
	}
}

// testLBIngressAndTraffic: a LoadBalancer Service gets an ingress, and
// HTTP through it is answered by the Service's pods.
func testLBIngressAndTraffic(ctx context.Context, t *T) {
	const name = "lb-traffic"
	env := t.Env
	lbDeployment(ctx, t, name, 2)
	lbCreateService(ctx, t, lbServiceSpec(env, name))
	svc, addr := lbWaitIngress(ctx, t, name)
	t.Logf("Service %s/%s got ingress %v", env.Namespace, name, lbIngressAddrs(svc))
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, "has a listener per Service port, forwarding to its NodePort",
			func(lb *api.LoadBalancer) (bool, string) { msg := lbCheckListeners(lb, svc); return msg == "", msg })
		if ing := lbIngressAddrs(svc); !slices.ContainsFunc(ing, func(a string) bool { return slices.Contains(lb.VIPs, a) }) {
			t.Errorf("ingress %v of Service %s/%s is none of the VIPs %v of its load balancer %s", ing, env.Namespace, name, lb.VIPs, lb.Name)
		}
		t.Logf("local cloud: load balancer %s, VIPs %v, listeners %s, backends %v", lb.Name, lb.VIPs, lbDescribeListeners(lb), lbBackendNames(lb))
	}
	if !lbReachable(t, "HTTP through the ingress") {
		return
	}
	pods := lbPodNames(lbWaitPods(ctx, t, name, 2))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	first := lbWaitServed(ctx, t, hp, "/hostname", pods)
	t.Logf("GET http://%s/hostname → %q", hp, lbShort(first.Body))
	// Once served, every request is: both pods are ready and, with
	// externalTrafficPolicy Cluster, every node forwards to them.
	served := map[string]int{}
	var failures []string
	for range 10 {
		a, err := lbGet(ctx, hp, "/hostname")
		if err == nil {
			if msg := lbCheckServed(a, pods); msg != "" {
				err = fmt.Errorf("%s", msg)
			}
		}
		if err != nil {
			failures = append(failures, err.Error())
			continue
		}
		pod, _ := lbPodIn(a.Body, pods)
		served[pod]++
	}
	if len(failures) > 0 {
		t.Errorf("%d of 10 requests through http://%s after the first answer failed: %v", len(failures), hp, failures)
	}
	t.Logf("10 more requests answered by pods %v", served)
}

// testLBUDP: a UDP LoadBalancer Service gets an ingress with a UDP
// listener, and datagrams through it are answered by its pods.
func testLBUDP(ctx context.Context, t *T) {
	const name = "lb-udp"
	env := t.Env
	lbDeployment(ctx, t, name, 2)
	lbCreateService(ctx, t, lbServiceSpec(env, name, lbUDPPort()))
	svc, addr := lbWaitIngress(ctx, t, name)
	t.Logf("Service %s/%s got ingress %v", env.Namespace, name, lbIngressAddrs(svc))
	lbCheckIngressPorts(t, svc)
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, "has a UDP listener forwarding to the NodePort",
			func(lb *api.LoadBalancer) (bool, string) { msg := lbCheckListeners(lb, svc); return msg == "", msg })
		t.Logf("local cloud: load balancer %s, listeners %s", lb.Name, lbDescribeListeners(lb))
	}
	if !lbReachable(t, "UDP through the ingress") {
		return
	}
	pods := lbPodNames(lbWaitPods(ctx, t, name, 2))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	answer := lbWaitUDPServed(ctx, t, hp, pods)
	t.Logf("UDP \"hostname\" to %s → %q", hp, lbShort(answer))
}

// testLBMixedProtocols: one Service with a TCP and a UDP port gets an
// ingress serving both.
func testLBMixedProtocols(ctx context.Context, t *T) {
	const name = "lb-mixed"
	env := t.Env
	lbDeployment(ctx, t, name, 2)
	lbCreateService(ctx, t, lbServiceSpec(env, name, lbTCPPort(), lbUDPPort()))
	svc, addr := lbWaitIngress(ctx, t, name)
	t.Logf("Service %s/%s got ingress %v", env.Namespace, name, lbIngressAddrs(svc))
	lbCheckIngressPorts(t, svc)
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, "has TCP and UDP listeners forwarding to the NodePorts",
			func(lb *api.LoadBalancer) (bool, string) { msg := lbCheckListeners(lb, svc); return msg == "", msg })
		t.Logf("local cloud: load balancer %s, listeners %s", lb.Name, lbDescribeListeners(lb))
	}
	if !lbReachable(t, "TCP and UDP through the ingress") {
		return
	}
	pods := lbPodNames(lbWaitPods(ctx, t, name, 2))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	a := lbWaitServed(ctx, t, hp, "/hostname", pods)
	t.Logf("TCP: GET http://%s/hostname → %q", hp, lbShort(a.Body))
	answer := lbWaitUDPServed(ctx, t, hp, pods)
	t.Logf("UDP: \"hostname\" to %s → %q", hp, lbShort(answer))
}

// lbCheckIngressPorts: when the ingress lists its ports (optional), each
// Service port is among them.
func lbCheckIngressPorts(t *T, svc *corev1.Service) {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if len(ing.Ports) == 0 {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if !slices.ContainsFunc(ing.Ports, func(ps corev1.PortStatus) bool { return ps.Port == sp.Port && ps.Protocol == sp.Protocol }) {
				t.Errorf("ingress %s of Service %s/%s lists ports %v but not %s/%d", ing.IP+ing.Hostname, svc.Namespace, svc.Name, ing.Ports, sp.Protocol, sp.Port)
			}
		}
	}
}

// lbBlockedRange is a documentation range (RFC 5737) no runner is in.
const lbBlockedRange = "192.0.2.0/24"

// testLBSourceRanges: loadBalancerSourceRanges that exclude the runner
// block its connections; including it lets them through; excluding it
// again blocks them again (so the block is the ranges' doing, not a load
// balancer that is not serving yet).
func testLBSourceRanges(ctx context.Context, t *T) {
	const name = "lb-source-ranges"
	env := t.Env
	lbDeployment(ctx, t, name, 1)
	spec := lbServiceSpec(env, name)
	spec.Spec.LoadBalancerSourceRanges = []string{lbBlockedRange}
	lbCreateService(ctx, t, spec)
	svc, addr := lbWaitIngress(ctx, t, name)
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	src, err := lbSourceAddr(hp)
	if err != nil {
		t.Fatalf("find the runner's source address towards %s: %v", hp, err)
	}
	if netip.MustParsePrefix(lbBlockedRange).Contains(src) {
		t.Fatalf("the runner's address %s is in %s, the range the test blocks with", src, lbBlockedRange)
	}
	allowed := []string{netip.PrefixFrom(src, src.BitLen()).String()}
	t.Logf("Service %s/%s got ingress %s; the runner connects from %s", env.Namespace, name, addr, src)
	pods := lbPodNames(lbWaitPods(ctx, t, name, 1))
	lbWaitCloudRanges(ctx, t, svc, []string{lbBlockedRange})

	// 1. Blocked from the start: no request may be answered.
	for i := range 5 {
		if a, err := lbGet(ctx, hp, "/hostname"); err == nil {
			t.Fatalf("GET http://%s/hostname was answered (%d %q) although loadBalancerSourceRanges [%s] exclude the runner's address %s (attempt %d)",
				hp, a.Status, lbShort(a.Body), lbBlockedRange, src, i+1)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("interrupted: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
	t.Logf("with loadBalancerSourceRanges [%s]: 5 requests from %s refused or timed out", lbBlockedRange, src)

	// 2. Allowed: traffic flows.
	svc = lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = allowed })
	lbWaitCloudRanges(ctx, t, svc, allowed)
	a := lbWaitServed(ctx, t, hp, "/hostname", pods)
	t.Logf("with loadBalancerSourceRanges %v: GET http://%s/hostname → %q", allowed, hp, lbShort(a.Body))

	// 3. Blocked again: requests fail (3 in a row).
	svc = lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{lbBlockedRange} })
	lbWaitCloudRanges(ctx, t, svc, []string{lbBlockedRange})
	fails := 0
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("3 requests in a row to http://%s refused or timing out after loadBalancerSourceRanges went back to [%s]", hp, lbBlockedRange),
		func(ctx context.Context) (bool, string) {
			a, err := lbGet(ctx, hp, "/hostname")
			if err != nil {
				fails++
				return fails >= 3, ""
			}
			fails = 0
			return false, fmt.Sprintf("still answered: %d %q", a.Status, lbShort(a.Body))
		})
	t.Logf("with loadBalancerSourceRanges [%s] again: requests from %s refused or timing out", lbBlockedRange, src)
}

// lbWaitCloudRanges waits, with the local cloud, until svc's load balancer
// has exactly ranges as source ranges.
func lbWaitCloudRanges(ctx context.Context, t *T, svc *corev1.Service, ranges []string) {
	if t.Env.Cloud == nil {
		return
	}
	want := slices.Sorted(slices.Values(ranges))
	lbWaitCloud(ctx, t, svc, time.Minute, fmt.Sprintf("allows exactly source ranges %v", want), func(lb *api.LoadBalancer) (bool, string) {
		got := slices.Sorted(slices.Values(lb.SourceRanges))
		return slices.Equal(got, want), fmt.Sprintf("source ranges %v", got)
	})
}

// testLBETPLocal: with externalTrafficPolicy Local and one pod, the load
// balancer's health checks keep only the pod's node in rotation, traffic
// is answered from that node, and the pod sees the client's address.
func testLBETPLocal(ctx context.Context, t *T) {
	const name = "lb-etp-local"
	env := t.Env
	lbDeployment(ctx, t, name, 1)
	spec := lbServiceSpec(env, name)
	spec.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lbCreateService(ctx, t, spec)
	svc, addr := lbWaitIngress(ctx, t, name)
	hcPort := svc.Spec.HealthCheckNodePort
	if hcPort == 0 {
		t.Errorf("Service %s/%s with externalTrafficPolicy Local has no spec.healthCheckNodePort", env.Namespace, name)
	}
	pods := lbWaitPods(ctx, t, name, 1)
	podName, node := pods[0].Name, pods[0].Spec.NodeName
	t.Logf("Service %s/%s got ingress %s; its pod %s runs on node %s; healthCheckNodePort %d", env.Namespace, name, addr, podName, node, hcPort)

	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, fmt.Sprintf("health-checks GET /healthz on healthCheckNodePort %d", hcPort),
			func(lb *api.LoadBalancer) (bool, string) {
				hc := lb.HealthCheck
				if hc == nil {
					return false, "no health check"
				}
				return hc.Type == api.HealthCheckHTTP && hc.Port == int(hcPort) && hc.Path == "/healthz",
					fmt.Sprintf("health check %s port %d path %q", hc.Type, hc.Port, hc.Path)
			})
		lbWaitHealth(ctx, t, lb.Name, fmt.Sprintf("to be exactly [%s], the pod's node", node), func(h *api.LoadBalancerHealth) (bool, string) {
			return slices.Equal(lbHealthyNames(h), []string{node}), "backends " + lbDescribeHealth(h)
		})
	}
	if !lbReachable(t, "traffic from the pod's node only, client address preserved") {
		return
	}
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	answer := lbWaitLocalStreak(ctx, t, hp, podName, node)
	via := ""
	if answer.Node != "" {
		via = " through node " + answer.Node
	}
	t.Logf("10 requests in a row answered by %s%s", podName, via)

	src, err := lbSourceAddr(hp)
	if err != nil {
		t.Fatalf("find the runner's source address towards %s: %v", hp, err)
	}
	a, err := lbGet(ctx, hp, "/clientip")
	if err != nil {
		t.Fatalf("GET http://%s/clientip: %v", hp, err)
	}
	seen, ok := lbClientIn(a.Body)
	switch {
	case !ok:
		t.Errorf("GET http://%s/clientip: the answer %q names no client address", hp, lbShort(a.Body))
	case seen != src:
		t.Errorf("client address not preserved with externalTrafficPolicy Local: the pod saw %s, the runner connects from %s (answer %q)", seen, src, lbShort(a.Body))
	default:
		t.Logf("the pod saw the runner's address %s", seen)
	}
}

// testLBNodeChanges: a node labelled exclude-from-external-load-balancers
// leaves the load balancer's backends, and comes back without the label.
func testLBNodeChanges(ctx context.Context, t *T) {
	env := t.Env
	if env.Cloud == nil {
		t.Skipf("needs the local cloud's API (--cloud-endpoint or --cloud-data-dir) to read the load balancer's backends")
	}
	const name = "lb-node-changes"
	lbCreateService(ctx, t, lbServiceSpec(env, name))
	svc, _ := lbWaitIngress(ctx, t, name)
	lb := lbWaitCloud(ctx, t, svc, time.Minute, "has backends", func(lb *api.LoadBalancer) (bool, string) {
		return len(lb.Backends) > 0, "no backends"
	})
	before := lbBackendNames(lb)
	node := before[len(before)-1]
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("backend %s of load balancer %s: get Node: %v", node, lb.Name, err)
	}
	prev, had := n.Labels[lbExcludeLabel]
	t.Logf("load balancer %s has backends %v; labelling node %s %s=true", lb.Name, before, node, lbExcludeLabel)
	if err := lbLabelNode(ctx, env, node, ptr.To("true")); err != nil {
		t.Fatalf("label node %s %s=true: %v", node, lbExcludeLabel, err)
	}
	t.Cleanup(func(ctx context.Context) {
		var restore *string
		if had {
			restore = &prev
		}
		if err := lbLabelNode(ctx, env, node, restore); err != nil {
			t.Errorf("clean-up: restore label %s of node %s: %v", lbExcludeLabel, node, err)
		}
	})
	lb = lbWaitCloud(ctx, t, svc, time.Minute, fmt.Sprintf("drops node %s (labelled %s=true) from its backends", node, lbExcludeLabel),
		func(lb *api.LoadBalancer) (bool, string) {
			names := lbBackendNames(lb)
			return !slices.Contains(names, node), fmt.Sprintf("backends %v", names)
		})
	t.Logf("node %s left: backends %v", node, lbBackendNames(lb))
	if err := lbLabelNode(ctx, env, node, nil); err != nil {
		t.Fatalf("remove label %s from node %s: %v", lbExcludeLabel, node, err)
	}
	lb = lbWaitCloud(ctx, t, svc, time.Minute, fmt.Sprintf("takes node %s back among its backends once the label %s is gone", node, lbExcludeLabel),
		func(lb *api.LoadBalancer) (bool, string) {
			names := lbBackendNames(lb)
			return slices.Contains(names, node), fmt.Sprintf("backends %v", names)
		})
	t.Logf("node %s is back: backends %v", node, lbBackendNames(lb))
}

// lbLabelNode sets the exclusion label of a node to *value, or removes it
// when value is nil.
func lbLabelNode(ctx context.Context, env *Env, node string, value *string) error {
	v := "null"
	if value != nil {
		v = strconv.Quote(*value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, lbExcludeLabel, v)
	_, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// lbOtherClass is a loadBalancerClass no provider implements.
const lbOtherClass = "example.com/other"

// testLBClassIgnored: a Service of another loadBalancerClass is left to
// that class's controller: no ingress, no finalizer, no load balancer.
func testLBClassIgnored(ctx context.Context, t *T) {
	const name = "lb-class-ignored"
	const watch = 20 * time.Second
	env := t.Env
	spec := lbServiceSpec(env, name)
	spec.Spec.LoadBalancerClass = ptr.To(lbOtherClass)
	created := lbCreateService(ctx, t, spec)
	deadline := time.Now().Add(watch)
	for time.Now().Before(deadline) {
		svc, err := env.Client.CoreV1().Services(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Service %s/%s: %v", env.Namespace, name, err)
		}
		if ing := lbIngressAddrs(svc); len(ing) > 0 {
			t.Fatalf("Service %s/%s of loadBalancerClass %s got ingress %v: a provider must leave other classes' Services alone", env.Namespace, name, lbOtherClass, ing)
		}
		if slices.Contains(svc.Finalizers, lbFinalizer) {
			t.Fatalf("Service %s/%s of loadBalancerClass %s got the finalizer %s: a provider must leave other classes' Services alone", env.Namespace, name, lbOtherClass, lbFinalizer)
		}
		if env.Cloud != nil {
			lb, err := lbCloud(ctx, env, created)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if lb != nil {
				t.Fatalf("the local cloud has load balancer %s for Service %s/%s of loadBalancerClass %s", lb.Name, env.Namespace, name, lbOtherClass)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("interrupted: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
	t.Logf("Service of loadBalancerClass %s: no ingress, no finalizer after %v", lbOtherClass, watch)
}

// testLBDeletion: deleting a Service with a load balancer removes the load
// balancer, then the finalizer, then the Service.
func testLBDeletion(ctx context.Context, t *T) {
	const name = "lb-deletion"
	env := t.Env
	lbCreateService(ctx, t, lbServiceSpec(env, name))
	svc, addr := lbWaitIngress(ctx, t, name)
	if !slices.Contains(svc.Finalizers, lbFinalizer) {
		t.Errorf("Service %s/%s has ingress %s but not the finalizer %s (finalizers %v)", env.Namespace, name, addr, lbFinalizer, svc.Finalizers)
	}
	var lbName string
	if env.Cloud != nil {
		lbName = lbWaitCloud(ctx, t, svc, 30*time.Second, "exists", nil).Name
		t.Logf("Service %s/%s has ingress %s, load balancer %s", env.Namespace, name, addr, lbName)
	}
	svcs := env.Client.CoreV1().Services(env.Namespace)
	if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Service %s/%s: %v", env.Namespace, name, err)
	}
	began := time.Now()
	t.Eventually(ctx, lbGoneTimeout, fmt.Sprintf("Service %s/%s to be gone after its deletion (the CCM deletes its load balancer, then removes the finalizer %s)", env.Namespace, name, lbFinalizer),
		func(ctx context.Context) (bool, string) {
			s, err := svcs.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("finalizers %v; %s", s.Finalizers, lbWhyNot(ctx, env, s))
		})
	t.Logf("Service gone %v after its deletion", time.Since(began).Round(100*time.Millisecond))
	if env.Cloud != nil {
		// The finalizer goes only once the load balancer is deleted.
		_, err := env.Cloud.GetLoadBalancer(ctx, lbName)
		switch {
		case client.IsNotFound(err):
			t.Logf("local cloud: load balancer %s is gone", lbName)
		case err != nil:
			t.Errorf("get load balancer %s: %v", lbName, err)
		default:
			t.Errorf("Service %s/%s is gone but the local cloud still has its load balancer %s", env.Namespace, name, lbName)
		}
	}
}

// testLBIPMode: each IP of the ingress says how it is reached (ipMode VIP
// or Proxy).
func testLBIPMode(ctx context.Context, t *T) {
	const name = "lb-ip-mode"
	env := t.Env
	lbCreateService(ctx, t, lbServiceSpec(env, name))
	svc, _ := lbWaitIngress(ctx, t, name)
	ips := 0
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		ips++
		switch {
		case ing.IPMode == nil:
			t.Errorf("ingress %s of Service %s/%s has no ipMode", ing.IP, env.Namespace, name)
		case *ing.IPMode != corev1.LoadBalancerIPModeVIP && *ing.IPMode != corev1.LoadBalancerIPModeProxy:
			t.Errorf("ingress %s of Service %s/%s has ipMode %q, neither VIP nor Proxy", ing.IP, env.Namespace, name, *ing.IPMode)
		default:
			t.Logf("ingress %s: ipMode %s", ing.IP, *ing.IPMode)
		}
	}
	if ips == 0 {
		t.Errorf("Service %s/%s has ingress %v without an IP: ipMode applies to IPs only", env.Namespace, name, lbIngressAddrs(svc))
	}
}
