package conformance

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// The scenarios of Kubernetes' own LoadBalancer e2e specs the suite had
// not covered (issue 28), with assertions at least as strong: traffic is
// sent whenever the run can reach the VIP, and what should stop answering
// is shown to stop.

// testLBTypeChanges is upstream's "should be able to change the type and
// ports of a TCP/UDP service": ClusterIP → NodePort → LoadBalancer, a port
// change keeping the ingress, and back to ClusterIP, which must destroy the
// cloud's load balancer, drop the finalizer and silence the VIP.
func testLBTypeChanges(proto corev1.Protocol) func(ctx context.Context, t *T) {
	return func(ctx context.Context, t *T) {
		name, port := "lb-type-tcp", lbTCPPort()
		if proto == corev1.ProtocolUDP {
			name, port = "lb-type-udp", lbUDPPort()
		}
		env := t.Env
		lbDeployment(ctx, t, name, 1)
		spec := lbServiceSpec(env, name, port)
		spec.Spec.Type = corev1.ServiceTypeClusterIP
		lbuCheckNoLB(ctx, t, lbCreateService(ctx, t, spec), "ClusterIP")
		svc := lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
		if svc.Spec.Ports[0].NodePort == 0 {
			t.Errorf("Service %s/%s of type NodePort has no nodePort", env.Namespace, name)
		}
		lbuCheckNoLB(ctx, t, svc, "NodePort")
		pods := lbPodNames(lbWaitPods(ctx, t, name, 1))

		lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })
		svc, addr := lbWaitIngress(ctx, t, name)
		ingress := lbIngressAddrs(svc)
		if !slices.Contains(svc.Finalizers, lbFinalizer) {
			t.Errorf("Service %s/%s has ingress %v but not the finalizer %s (finalizers %v)", env.Namespace, name, ingress, lbFinalizer, svc.Finalizers)
		}
		var lbName string
		if env.Cloud != nil {
			lbName = lbWaitCloud(ctx, t, svc, 30*time.Second, "has a listener per Service port",
				func(lb *api.LoadBalancer) (bool, string) { msg := lbCheckListeners(lb, svc); return msg == "", msg }).Name
		}
		reachable := lbReachable(t, "traffic through the ingress after each change, the VIP silent after the change back to ClusterIP")
		hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
		if reachable {
			t.Logf("type LoadBalancer: ingress %v; %s to %s → %q", ingress, proto, hp, lbShort(lbuWaitServed(ctx, t, proto, hp, pods)))
		}

		// The port changes; the load balancer is updated in place.
		const newPort = lbPort + 1
		svc = lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.Ports[0].Port = newPort })
		if env.Cloud != nil {
			lbWaitCloud(ctx, t, svc, 30*time.Second, fmt.Sprintf("listens on %s/%d only", proto, newPort), func(lb *api.LoadBalancer) (bool, string) {
				_, old := lbListener(lb, proto, lbPort)
				msg := lbCheckListeners(lb, svc)
				return msg == "" && !old, fmt.Sprintf("%s; listeners %s", msg, lbDescribeListeners(lb))
			})
		}
		newHP := net.JoinHostPort(addr, strconv.Itoa(newPort))
		if reachable {
			a := lbuWaitServed(ctx, t, proto, newHP, pods)
			lbuWaitNotServed(ctx, t, proto, hp, fmt.Sprintf("the old port %d after the port changed to %d", lbPort, newPort))
			t.Logf("port %d → %d: %s to %s → %q; %s silent", lbPort, newPort, proto, newHP, lbShort(a), hp)
		}
		if got := lbuIngressNow(ctx, t, name); !slices.Equal(got, ingress) {
			t.Errorf("the ingress of Service %s/%s changed from %v to %v when its port changed: the load balancer must be updated in place", env.Namespace, name, ingress, got)
		}

		// Back to ClusterIP: the load balancer goes.
		lbUpdateService(ctx, t, name, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Spec.Ports[0].NodePort = 0
		})
		t.Eventually(ctx, lbGoneTimeout, fmt.Sprintf("Service %s/%s, back to ClusterIP, without ingress and finalizer %s", env.Namespace, name, lbFinalizer),
			func(ctx context.Context) (bool, string) {
				s, err := env.Client.CoreV1().Services(env.Namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return len(lbIngressAddrs(s)) == 0 && !slices.Contains(s.Finalizers, lbFinalizer),
					fmt.Sprintf("ingress %v, finalizers %v; %s", lbIngressAddrs(s), s.Finalizers, lbWhyNot(ctx, env, s))
			})
		if env.Cloud != nil {
			t.Eventually(ctx, lbGoneTimeout, fmt.Sprintf("the local cloud's load balancer %s deleted", lbName), func(ctx context.Context) (bool, string) {
				_, err := env.Cloud.GetLoadBalancer(ctx, lbName)
				return client.IsNotFound(err), fmt.Sprintf("get: %v", err)
			})
		}
		if reachable {
			lbuWaitNotServed(ctx, t, proto, newHP, "the VIP after the change back to ClusterIP")
		}
		t.Logf("back to ClusterIP: no ingress, no finalizer, load balancer %s gone, %s silent", lbName, newHP)
	}
}

// testLBSessionAffinity is upstream's "should have session affinity work
// for LoadBalancer service" and its switch: with sessionAffinity ClientIP
// one client's requests all reach one backend; switched off they spread.
func testLBSessionAffinity(ctx context.Context, t *T) {
	const name, n = "lb-affinity", 15
	env := t.Env
	lbDeployment(ctx, t, name, 3)
	spec := lbServiceSpec(env, name)
	spec.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	lbCreateService(ctx, t, spec)
	svc, addr := lbWaitIngress(ctx, t, name)
	pods := lbPodNames(lbWaitPods(ctx, t, name, 3))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	lbWaitServed(ctx, t, hp, "/hostname", pods)
	ask := func(ctx context.Context) (keys, failures []string) {
		for range n {
			a, err := lbGet(ctx, hp, "/hostname")
			key, ok := lbuBackendKey(a, pods)
			switch {
			case err != nil:
				failures = append(failures, err.Error())
			case !ok:
				failures = append(failures, lbCheckServed(a, pods))
			default:
				keys = append(keys, key)
			}
		}
		return keys, failures
	}
	keys, failures := ask(ctx)
	if len(failures) > 0 {
		t.Errorf("%d of %d requests to http://%s failed: %v", len(failures), n, hp, failures)
	}
	if ok, detail := lbuAffinityVerdict(keys, true); !ok {
		t.Errorf("sessionAffinity ClientIP: %d requests from one client to http://%s reached more than one backend: %s", n, hp, detail)
	} else {
		t.Logf("sessionAffinity ClientIP: %d requests all answered by %s", n, detail)
	}
	if env.Cloud != nil {
		lbWaitCloud(ctx, t, svc, 30*time.Second, "has client-IP affinity", func(lb *api.LoadBalancer) (bool, string) {
			return lb.ClientIPAffinity, "clientIPAffinity false"
		})
	}

	svc = lbUpdateService(ctx, t, name, func(s *corev1.Service) {
		s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
	})
	if env.Cloud != nil {
		lbWaitCloud(ctx, t, svc, 30*time.Second, "has no client-IP affinity", func(lb *api.LoadBalancer) (bool, string) {
			return !lb.ClientIPAffinity, "clientIPAffinity true"
		})
	}
	detail := ""
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("%d requests to http://%s spread over more than one backend with sessionAffinity None", n, hp),
		func(ctx context.Context) (bool, string) {
			keys, failures := ask(ctx)
			if len(failures) > 0 {
				return false, fmt.Sprintf("failures %v", failures)
			}
			ok, d := lbuAffinityVerdict(keys, false)
			detail = d
			return ok, d
		})
	t.Logf("sessionAffinity None: %d requests answered by %s", n, detail)
}

// testLBUDPPodCycles is upstream's "should be able to preserve UDP
// traffic when server pod cycles for a LoadBalancer service on different
// nodes": one client flow (the same source port throughout) is answered
// by the server pod, and by its replacement on another node once it is
// replaced.
func testLBUDPPodCycles(ctx context.Context, t *T) {
	const name = "lb-udp-cycles"
	env := t.Env
	nodes := lbuSchedulableNodes(ctx, t)
	lbDeployment(ctx, t, name, 1)
	lbCreateService(ctx, t, lbServiceSpec(env, name, lbUDPPort()))
	_, addr := lbWaitIngress(ctx, t, name)
	pod := lbWaitPods(ctx, t, name, 1)[0]
	to, ok := lbuOtherNode(nodes, pod.Spec.NodeName)
	if !ok {
		t.Skipf("needs a second schedulable node to move pod %s to from %s (schedulable: %v)", pod.Name, pod.Spec.NodeName, lbuNodeNames(nodes))
	}
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	raddr, err := net.ResolveUDPAddr("udp", hp)
	if err != nil {
		t.Fatalf("resolve %s: %v", hp, err)
	}
	conn, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatalf("dial udp %s: %v", hp, err)
	}
	defer func() { _ = conn.Close() }()
	// One socket: every datagram is of the same flow, as upstream's client
	// with its fixed source port; stale flow state (conntrack, the load
	// balancer's flow table) must not keep it on the deleted pod.
	var history []string
	send := func() string {
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 2048)
		if _, err := conn.Write([]byte("hostname")); err != nil {
			return ""
		}
		k, err := conn.Read(buf)
		if err != nil {
			return ""
		}
		p, _ := lbuPodOf(string(buf[:k]), name)
		return p
	}
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("the flow from %s to udp %s answered by pod %s", conn.LocalAddr(), hp, pod.Name),
		func(ctx context.Context) (bool, string) {
			history = append(history, send())
			return history[len(history)-1] == pod.Name, fmt.Sprintf("answers %q", lbuTail(history, 5))
		})
	t.Logf("flow %s → %s answered by %s on %s; moving the pod to node %s", conn.LocalAddr(), hp, pod.Name, pod.Spec.NodeName, to)
	lbuEditDeployment(ctx, t, name, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: to}
	})
	began := time.Now()
	history = nil
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("the same flow answered 5 times in a row by the replacement of pod %s on node %s", pod.Name, to),
		func(ctx context.Context) (bool, string) {
			history = append(history, send())
			return lbuMovedOn(history, pod.Name, 5)
		})
	t.Logf("the flow moved to pod %s within %v (answers %q)", history[len(history)-1], time.Since(began).Round(100*time.Millisecond), lbuTail(history, 12))
}

// testLBRollingUpdate is upstream's "should not have connectivity
// disruption during rolling update": requests through the VIP while the
// Deployment rolls all fail none (upstream allows 5%).
func testLBRollingUpdate(ctx context.Context, t *T) {
	const name, replicas = "lb-rolling", 3
	env := t.Env
	lbDeployment(ctx, t, name, replicas)
	// Pods that keep serving after SIGTERM while proxies drop them, and a
	// rollout that never has fewer than the replicas ready (upstream's
	// --delay-shutdown).
	lbuEditDeployment(ctx, t, name, func(d *appsv1.Deployment) {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}}
		d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
		c := &d.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--delay-shutdown=10")
	})
	lbuWaitRollout(ctx, t, name)
	lbCreateService(ctx, t, lbServiceSpec(env, name))
	_, addr := lbWaitIngress(ctx, t, name)
	before := lbPodNames(lbWaitPods(ctx, t, name, replicas))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	lbWaitServed(ctx, t, hp, "/hostname", before)

	var (
		mu       sync.Mutex
		total    int
		failures []string
		served   = map[string]int{}
	)
	stop, done := make(chan struct{}), make(chan struct{})
	// Stopped also when a wait below ends the test.
	stopTraffic := sync.OnceFunc(func() { close(stop); <-done })
	defer stopTraffic()
	go func() {
		defer close(done)
		for {
			a, err := lbGet(ctx, hp, "/hostname")
			pod, ok := lbuPodOf(a.Body, name)
			mu.Lock()
			total++
			switch {
			case err != nil:
				failures = append(failures, err.Error())
			case a.Status != http.StatusOK || !ok:
				failures = append(failures, fmt.Sprintf("answer %d %q", a.Status, lbShort(a.Body)))
			default:
				served[pod]++
			}
			mu.Unlock()
			// Paced (upstream polls too): a rollout of seconds still sees
			// tens of requests, without loading the machine under test.
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	lbuEditDeployment(ctx, t, name, func(d *appsv1.Deployment) {
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations["conformance.portside.io/restarted-at"] = began.UTC().Format(time.RFC3339Nano)
	})
	lbuWaitRollout(ctx, t, name)
	after := lbPodNames(lbWaitPods(ctx, t, name, replicas))
	time.Sleep(2 * time.Second) // traffic on the new pods alone for a while
	stopTraffic()
	mu.Lock()
	defer mu.Unlock()
	newServed := 0
	for _, p := range after {
		newServed += served[p]
	}
	switch {
	case len(failures) > 0:
		t.Errorf("%d of %d requests to http://%s failed during the rolling update of Deployment %s/%s: %v", len(failures), total, hp, env.Namespace, name, lbuTail(failures, 5))
	case slices.ContainsFunc(after, func(p string) bool { return slices.Contains(before, p) }):
		t.Errorf("Deployment %s/%s rolled but kept pods: %v before, %v after", env.Namespace, name, before, after)
	case newServed == 0:
		t.Errorf("none of %d requests during the rolling update reached a new pod %v: served %v", total, after, served)
	}
	t.Logf("rolling update of %v to %v in %v: %d requests, %d failed, served %v", before, after, time.Since(began).Round(100*time.Millisecond), total, len(failures), served)
}

// testLBETPLocalEndpoints is upstream's "ExternalTrafficPolicy: Local
// should only target nodes with endpoints": the cloud's healthy backends
// are exactly the nodes with ready endpoints, and follow the pod when it
// moves to another node.
func testLBETPLocalEndpoints(ctx context.Context, t *T) {
	const name = "lb-etp-endpoints"
	env := t.Env
	if env.Cloud == nil && !env.Capabilities[LBReachable] {
		t.Skipf("needs the local cloud's API (--cloud-endpoint or --cloud-data-dir) or %s to see which nodes serve", LBReachable)
	}
	nodes := lbuSchedulableNodes(ctx, t)
	lbDeployment(ctx, t, name, 1)
	spec := lbServiceSpec(env, name)
	spec.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lbCreateService(ctx, t, spec)
	svc, addr := lbWaitIngress(ctx, t, name)
	pod := lbWaitPods(ctx, t, name, 1)[0]
	to, ok := lbuOtherNode(nodes, pod.Spec.NodeName)
	if !ok {
		t.Skipf("needs a second schedulable node to move pod %s to from %s (schedulable: %v)", pod.Name, pod.Spec.NodeName, lbuNodeNames(nodes))
	}
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	lbuCheckLocalServing(ctx, t, svc, hp, pod)
	lbuEditDeployment(ctx, t, name, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: to}
	})
	lbuCheckLocalServing(ctx, t, svc, hp, lbuWaitPodOn(ctx, t, name, to))
}

// lbuCheckLocalServing: with the local cloud, the healthy backends are
// exactly the nodes with ready endpoints, which are pod's; when reachable,
// 10 requests in a row are answered by pod (through its node, when the
// answer says).
func lbuCheckLocalServing(ctx context.Context, t *T, svc *corev1.Service, hp string, pod corev1.Pod) {
	env := t.Env
	want := []string{pod.Spec.NodeName}
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, "exists", nil)
		t.Eventually(ctx, 2*time.Minute, fmt.Sprintf("the healthy backends of load balancer %s to be the nodes with endpoints, %v", lb.Name, want),
			func(ctx context.Context) (bool, string) {
				list, err := env.Client.DiscoveryV1().EndpointSlices(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
				if err != nil {
					return false, "list EndpointSlices: " + err.Error()
				}
				h, err := env.Cloud.LoadBalancerHealth(ctx, lb.Name)
				if err != nil {
					return false, "load balancer health: " + err.Error()
				}
				eps, healthy := lbuEndpointNodes(list.Items), lbHealthyNames(h)
				return slices.Equal(eps, want) && slices.Equal(healthy, want), fmt.Sprintf("nodes with endpoints %v, backends %s", eps, lbDescribeHealth(h))
			})
		t.Logf("pod %s on %s: the only healthy backend is %v", pod.Name, pod.Spec.NodeName, want)
	}
	if !lbReachable(t, fmt.Sprintf("traffic answered by pod %s only", pod.Name)) {
		return
	}
	streak := 0
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("10 requests in a row to http://%s answered by pod %s on node %s", hp, pod.Name, pod.Spec.NodeName),
		func(ctx context.Context) (bool, string) {
			a, err := lbGet(ctx, hp, "/hostname")
			msg := ""
			switch {
			case err != nil:
				msg = err.Error()
			case lbCheckServed(a, []string{pod.Name}) != "":
				msg = lbCheckServed(a, []string{pod.Name})
			case a.Node != "" && a.Node != pod.Spec.NodeName:
				msg = fmt.Sprintf("answered through node %s (X-Node)", a.Node)
			}
			if msg != "" {
				streak = 0
				return false, msg
			}
			streak++
			return streak >= 10, ""
		})
}

// testLBSamePortProtocols is upstream's "should serve endpoints on same
// port and different protocol" through the VIP: a TCP Service gains UDP on
// the same port, keeps its ingress, and both are answered.
func testLBSamePortProtocols(ctx context.Context, t *T) {
	const name = "lb-same-port"
	env := t.Env
	lbDeployment(ctx, t, name, 2)
	lbCreateService(ctx, t, lbServiceSpec(env, name))
	svc, addr := lbWaitIngress(ctx, t, name)
	ingress := lbIngressAddrs(svc)
	pods := lbPodNames(lbWaitPods(ctx, t, name, 2))
	hp := net.JoinHostPort(addr, strconv.Itoa(lbPort))
	reachable := lbReachable(t, "TCP and UDP on the same port through the ingress")
	if reachable {
		lbWaitServed(ctx, t, hp, "/hostname", pods)
	}
	svc = lbUpdateService(ctx, t, name, func(s *corev1.Service) { s.Spec.Ports = append(s.Spec.Ports, lbUDPPort()) })
	if env.Cloud != nil {
		lb := lbWaitCloud(ctx, t, svc, 30*time.Second, fmt.Sprintf("has TCP/%d and UDP/%d listeners forwarding to their NodePorts", lbPort, lbPort),
			func(lb *api.LoadBalancer) (bool, string) { msg := lbCheckListeners(lb, svc); return msg == "", msg })
		t.Logf("local cloud: load balancer %s, listeners %s", lb.Name, lbDescribeListeners(lb))
	}
	if reachable {
		u := lbWaitUDPServed(ctx, t, hp, pods)
		a := lbWaitServed(ctx, t, hp, "/hostname", pods)
		t.Logf("on %s: TCP → %q, UDP → %q", hp, lbShort(a.Body), lbShort(u))
	}
	svc, err := env.Client.CoreV1().Services(env.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Service %s/%s: %v", env.Namespace, name, err)
	}
	if got := lbIngressAddrs(svc); !slices.Equal(got, ingress) {
		t.Errorf("the ingress of Service %s/%s changed from %v to %v when it gained UDP/%d", env.Namespace, name, ingress, got, lbPort)
	}
	lbCheckIngressPorts(t, svc)
}
