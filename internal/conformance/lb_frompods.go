package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// testLBETPLocalFromPods is upstream's "ExternalTrafficPolicy: Local
// should work from pods": a pod of the cluster connects to the ingress of
// an externalTrafficPolicy=Local Service, from a node without endpoints
// when there is one, and is answered by the Service's pod, which sees the
// client pod's own address. kube-proxy takes in-cluster traffic to a VIP
// ingress (ipMode VIP, the default) to the endpoints directly, so neither
// the node's lack of a local endpoint nor source NAT may get in the way.
// The client is agnhost netexec, asked through the apiserver's pod proxy
// to dial (upstream execs curl in a pod; the path is the same).
func testLBETPLocalFromPods(ctx context.Context, t *T) {
	const name = "lb-etp-from-pods"
	env := t.Env
	var nodes []corev1.Node
	for _, n := range lbuSchedulableNodes(ctx, t) {
		// A real kubelet always reports its runtime; `portside up`'s
		// simulated nodes run no container, so no pod could send.
		if n.Status.NodeInfo.ContainerRuntimeVersion != "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		t.Skipf("no schedulable node reports a container runtime (simulated nodes): no pod can send traffic")
	}
	lbDeployment(ctx, t, name, 1)
	spec := lbServiceSpec(env, name)
	spec.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lbCreateService(ctx, t, spec)
	svc, addr := lbWaitIngress(ctx, t, name)
	server := lbWaitPods(ctx, t, name, 1)[0]
	node, other := lbuOtherNode(nodes, server.Spec.NodeName)
	if !other {
		node = server.Spec.NodeName
	}
	client := lbClientPod(ctx, t, name+"-client", node)
	clientIP, _ := netip.ParseAddr(client.Status.PodIP)
	where := "a node without endpoints"
	if !other {
		where = "the endpoint's own node (the only schedulable one)"
	}
	t.Logf("client pod %s (%s) on %s, %s; server pod %s on %s; ingress %s", client.Name, clientIP, node, where, server.Name, server.Spec.NodeName, addr)
	var last string
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("pod %s to reach http://%s:%d through the ingress, answered by pod %s seeing the client pod's address %s", client.Name, addr, lbPort, server.Name, clientIP),
		func(ctx context.Context) (bool, string) {
			host, err := lbDial(ctx, env, client.Name, "hostname", addr, lbPort)
			if err != nil {
				return false, err.Error()
			}
			seen, err := lbDial(ctx, env, client.Name, "clientip", addr, lbPort)
			if err != nil {
				return false, err.Error()
			}
			ok, detail := lbFromPodVerdict(host, seen, server.Name, clientIP, lbIngressIPMode(svc, addr))
			last = detail
			return ok, detail
		})
	t.Logf("from pod %s: %s", client.Name, last)
}

// lbClientPod runs agnhost netexec as one pod on node, waits until it is
// ready and registers its deletion.
func lbClientPod(ctx context.Context, t *T, name, node string) *corev1.Pod {
	env := t.Env
	pods := env.Client.CoreV1().Pods(env.Namespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbLabels(env, name)},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "netexec", Image: lbImage, Args: []string{"netexec", "--http-port=" + strconv.Itoa(lbPort)},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/hostname", Port: intstr.FromInt32(lbPort)}}, PeriodSeconds: 2},
			}},
		},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", env.Namespace, name, err)
	}
	t.Cleanup(func(ctx context.Context) {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clean-up: delete pod %s/%s: %v", env.Namespace, name, err)
		}
	})
	var got *corev1.Pod
	t.Eventually(ctx, lbPodsTimeout, fmt.Sprintf("pod %s/%s ready on node %s", env.Namespace, name, node), func(ctx context.Context) (bool, string) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		return lbPodReady(p) && p.Status.PodIP != "", lbPodState(p)
	})
	return got
}

// lbDial asks the netexec pod pod to send request (hostname, clientip)
// over HTTP to host:port once, and returns the answer.
func lbDial(ctx context.Context, env *Env, pod, request, host string, port int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	raw, err := env.Client.CoreV1().Pods(env.Namespace).ProxyGet("http", pod, strconv.Itoa(lbPort), "/dial", map[string]string{
		"request": request, "protocol": "http", "host": host, "port": strconv.Itoa(port), "tries": "1",
	}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("ask pod %s to dial %s:%d (through the apiserver's pod proxy): %v", pod, host, port, err)
	}
	return parseDial(raw)
}

// parseDial reads netexec's /dial answer: {"responses": [...]} or
// {"errors": [...]}.
func parseDial(raw []byte) (string, error) {
	var out struct {
		Responses []string `json:"responses"`
		Errors    []string `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("not netexec's /dial answer: %q", lbShort(string(raw)))
	}
	switch {
	case len(out.Responses) > 0:
		return out.Responses[0], nil
	case len(out.Errors) > 0:
		return "", fmt.Errorf("the pod's request failed: %s", out.Errors[0])
	}
	return "", fmt.Errorf("the pod's request got no answer: %q", lbShort(string(raw)))
}

// lbIngressIPMode is the ipMode of the ingress entry addr (nil when unset).
func lbIngressIPMode(svc *corev1.Service, addr string) *corev1.LoadBalancerIPMode {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == addr || ing.Hostname == addr {
			return ing.IPMode
		}
	}
	return nil
}

// lbFromPodVerdict judges a pod's two answers through the ingress: served
// by server, and (unless the ingress is ipMode Proxy, which sends pods'
// traffic out to the load balancer, whose address the pod then sees) the
// source the server saw is the client pod's.
func lbFromPodVerdict(hostname, clientip, server string, client netip.Addr, mode *corev1.LoadBalancerIPMode) (bool, string) {
	if hostname != server {
		return false, fmt.Sprintf("answered by %q, not the Service's pod %s", lbShort(hostname), server)
	}
	seen, ok := parseAddr(clientip)
	if !ok {
		return false, fmt.Sprintf("the /clientip answer %q names no address", lbShort(clientip))
	}
	if mode != nil && *mode == corev1.LoadBalancerIPModeProxy {
		return true, fmt.Sprintf("answered by %s; ipMode Proxy, so the source it saw (%s) is the load balancer's to choose", server, seen)
	}
	if seen != client.Unmap() {
		return false, fmt.Sprintf("pod %s saw the client as %s, not the client pod's address %s (source NAT on the in-cluster path)", server, seen, client)
	}
	return true, fmt.Sprintf("answered by %s, which saw the client pod's address %s", server, seen)
}
