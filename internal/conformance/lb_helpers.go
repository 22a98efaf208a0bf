package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// The backend of the load-balancer tests: agnhost's netexec on a real
// cluster (GET /hostname → the pod's name, GET /clientip → the client's
// ip:port, UDP "hostname" → the pod's name). On `portside up` pods run no
// image: the kube-proxy stand-ins answer every HTTP request with "hello
// from <ns>/<pod> (...) through <node>; service ..., client <ip:port>"
// (headers X-Node, X-Pod) and echo UDP datagrams as "<node>/<ns>/<pod>:
// <datagram>". Both name the pod and the client, which is what the tests
// check.
const (
	lbImage = TestImage
	lbPort  = 8080

	// lbFinalizer is the cloud-provider cleanup finalizer of LoadBalancer Services.
	lbFinalizer = "service.kubernetes.io/load-balancer-cleanup"
	// lbExcludeLabel takes a node out of load balancers' backends.
	lbExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

	lbIngressTimeout = 2 * time.Minute
	lbPodsTimeout    = 3 * time.Minute
	lbTrafficTimeout = 3 * time.Minute
	lbGoneTimeout    = 2 * time.Minute
	lbRequestTimeout = 3 * time.Second
)

func lbLabels(env *Env, app string) map[string]string {
	return map[string]string{"app": app, RunLabel: env.RunID}
}

// lbDeployment creates a Deployment of agnhost netexec named name with
// replicas pods spread over nodes, and registers its deletion.
func lbDeployment(ctx context.Context, t *T, name string, replicas int32) {
	env := t.Env
	labels := lbLabels(env, name)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name:  "netexec",
						Image: lbImage,
						Args:  []string{"netexec", "--http-port=" + strconv.Itoa(lbPort), "--udp-port=" + strconv.Itoa(lbPort)},
						Ports: []corev1.ContainerPort{
							{Name: "http", ContainerPort: lbPort, Protocol: corev1.ProtocolTCP},
							{Name: "udp", ContainerPort: lbPort, Protocol: corev1.ProtocolUDP},
						},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/hostname", Port: intstr.FromInt32(lbPort)}}, PeriodSeconds: 2},
					}},
				},
			},
		},
	}
	if _, err := env.Client.AppsV1().Deployments(env.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment %s/%s: %v", env.Namespace, name, err)
	}
	t.Cleanup(func(ctx context.Context) {
		err := env.Client.AppsV1().Deployments(env.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clean-up: delete Deployment %s/%s: %v", env.Namespace, name, err)
		}
	})
}

// lbWaitPods waits until the Deployment name has exactly replicas pods,
// all running and ready, and returns them.
func lbWaitPods(ctx context.Context, t *T, name string, replicas int) []corev1.Pod {
	env := t.Env
	var pods []corev1.Pod
	t.Eventually(ctx, lbPodsTimeout, fmt.Sprintf("%d ready pods of Deployment %s/%s", replicas, env.Namespace, name), func(ctx context.Context) (bool, string) {
		list, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "list pods: " + err.Error()
		}
		pods = pods[:0]
		var notReady []string
		for _, pod := range list.Items {
			if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && lbPodReady(&pod) {
				pods = append(pods, pod)
			} else {
				notReady = append(notReady, fmt.Sprintf("%s (%s)", pod.Name, lbPodState(&pod)))
			}
		}
		if len(pods) == replicas && len(notReady) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d of %d pods ready; not ready: %v", len(pods), replicas, notReady)
	})
	return pods
}

func lbPodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func lbPodState(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "terminating"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return string(pod.Status.Phase) + ", " + w.Reason
		}
	}
	if pod.Spec.NodeName == "" {
		return "unscheduled"
	}
	return string(pod.Status.Phase)
}

func lbPodNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// lbServiceSpec is a LoadBalancer Service selecting the Deployment name's
// pods, with the given ports (TCP 8080 "http" when none).
func lbServiceSpec(env *Env, name string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{lbTCPPort()}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name, Labels: lbLabels(env, name)},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    ports,
		},
	}
}

func lbTCPPort() corev1.ServicePort {
	return corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: lbPort, TargetPort: intstr.FromString("http")}
}

func lbUDPPort() corev1.ServicePort {
	return corev1.ServicePort{Name: "udp", Protocol: corev1.ProtocolUDP, Port: lbPort, TargetPort: intstr.FromString("udp")}
}

// lbCreateService creates svc and registers its deletion, waiting until it
// is gone (its load balancer deleted, the cleanup finalizer removed).
func lbCreateService(ctx context.Context, t *T, svc *corev1.Service) *corev1.Service {
	env := t.Env
	created, err := env.Client.CoreV1().Services(env.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Service %s/%s: %v", env.Namespace, svc.Name, err)
	}
	t.Cleanup(func(ctx context.Context) {
		if err := lbDeleteServiceAndWait(ctx, env, svc.Name, 90*time.Second); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	})
	return created
}

// lbDeleteServiceAndWait deletes a Service and waits until it is gone.
func lbDeleteServiceAndWait(ctx context.Context, env *Env, name string, timeout time.Duration) error {
	svcs := env.Client.CoreV1().Services(env.Namespace)
	if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("delete Service %s/%s: %w", env.Namespace, name, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			detail := fmt.Sprint(err)
			if err == nil {
				detail = fmt.Sprintf("finalizers %v", svc.Finalizers)
			}
			return fmt.Errorf("the Service %s/%s still exists %v after its deletion (%s)", env.Namespace, name, timeout, detail)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

// lbIngressAddrs are the addresses of a Service's load-balancer ingress
// (IP, or hostname when it has none).
func lbIngressAddrs(svc *corev1.Service) []string {
	var out []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		switch {
		case ing.IP != "":
			out = append(out, ing.IP)
		case ing.Hostname != "":
			out = append(out, ing.Hostname)
		}
	}
	return out
}

// lbWaitIngress waits until the Service has a load-balancer ingress and
// returns the Service and its first ingress address.
func lbWaitIngress(ctx context.Context, t *T, name string) (*corev1.Service, string) {
	env := t.Env
	var svc *corev1.Service
	t.Eventually(ctx, lbIngressTimeout, fmt.Sprintf("a load-balancer ingress on Service %s/%s", env.Namespace, name), func(ctx context.Context) (bool, string) {
		s, err := env.Client.CoreV1().Services(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "get Service: " + err.Error()
		}
		svc = s
		if len(lbIngressAddrs(s)) > 0 {
			return true, ""
		}
		return false, "status.loadBalancer.ingress is empty; " + lbWhyNot(ctx, env, s)
	})
	return svc, lbIngressAddrs(svc)[0]
}

// lbWhyNot tells what a Service's conditions and latest warning event say.
func lbWhyNot(ctx context.Context, env *Env, svc *corev1.Service) string {
	var parts []string
	for _, c := range svc.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("condition %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	list, err := env.Client.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", svc.Name), fields.OneTermEqualSelector("involvedObject.kind", "Service"),
		fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()})
	if err == nil && len(list.Items) > 0 {
		e := list.Items[len(list.Items)-1]
		parts = append(parts, "last warning event: "+e.Reason+": "+e.Message)
	}
	if len(parts) == 0 {
		return "no warning events"
	}
	return strings.Join(parts, "; ")
}

// lbUpdateService reads the Service, applies change and writes it back,
// again on a conflict (the CCM writes its status and finalizers).
func lbUpdateService(ctx context.Context, t *T, name string, change func(*corev1.Service)) *corev1.Service {
	env := t.Env
	svcs := env.Client.CoreV1().Services(env.Namespace)
	var lastErr error
	for range 10 {
		svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Service %s/%s: %v", env.Namespace, name, err)
		}
		change(svc)
		updated, err := svcs.Update(ctx, svc, metav1.UpdateOptions{})
		if err == nil {
			return updated
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update Service %s/%s: %v", env.Namespace, name, err)
		}
		lastErr = err
	}
	t.Fatalf("update Service %s/%s: %v", env.Namespace, name, lastErr)
	return nil
}

// lbReachable reports whether the run may connect to ingress addresses;
// when not, it logs what is therefore not checked.
func lbReachable(t *T, what string) bool {
	if t.Env.Capabilities[LBReachable] {
		return true
	}
	t.Logf("not checked (capability %s not given): %s", LBReachable, what)
	return false
}

// --- traffic ---

// httpAnswer is one HTTP answer through a load balancer.
type httpAnswer struct {
	Status int
	// Node and Pod are the kube-proxy stand-in's X-Node and X-Pod headers
	// (`portside up` only; empty elsewhere).
	Node, Pod string
	Body      string
	// Local is the runner's end of the connection.
	Local netip.AddrPort
}

// lbGet sends GET http://hostPort/path on a fresh connection.
func lbGet(ctx context.Context, hostPort, path string) (httpAnswer, error) {
	var local netip.AddrPort
	dialer := &net.Dialer{Timeout: lbRequestTimeout}
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
				local = a.AddrPort()
			}
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: lbRequestTimeout, Transport: tr}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+path, nil)
	if err != nil {
		return httpAnswer{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return httpAnswer{}, fmt.Errorf("GET http://%s%s: reading the answer: %w", hostPort, path, err)
	}
	return httpAnswer{Status: resp.StatusCode, Node: resp.Header.Get("X-Node"), Pod: resp.Header.Get("X-Pod"),
		Body: strings.TrimSpace(string(data)), Local: local}, nil
}

// lbPodIn returns which of pods an answer names: the longest pod name that
// occurs in body as a whole word (between characters that cannot be part
// of a pod name).
func lbPodIn(body string, pods []string) (string, bool) {
	best := ""
	for _, name := range pods {
		if len(name) > len(best) && containsWord(body, name) {
			best = name
		}
	}
	return best, best != ""
}

func containsWord(s, word string) bool {
	if word == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(word)
		if (start == 0 || !nameChar(s[start-1])) && (end == len(s) || !nameChar(s[end])) {
			return true
		}
		i = start + 1
	}
}

// nameChar reports whether c can be part of a pod name (DNS subdomain).
func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}

// lbClientIn returns the client address an answer names: agnhost's
// /clientip answers "ip:port"; the kube-proxy stand-in ends its answer
// with "client ip:port".
func lbClientIn(body string) (netip.Addr, bool) {
	body = strings.TrimSpace(body)
	if i := strings.LastIndex(body, "client "); i >= 0 {
		tok := strings.Fields(body[i+len("client "):])
		if len(tok) > 0 {
			if a, ok := parseAddr(strings.TrimRight(tok[0], ".,;)")); ok {
				return a, true
			}
		}
	}
	return parseAddr(body)
}

func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// lbWaitServed waits until GET path through hostPort is answered 200 by
// one of pods (the load balancer may take a while to find healthy
// backends) and returns the answer.
func lbWaitServed(ctx context.Context, t *T, hostPort, path string, pods []string) httpAnswer {
	var ans httpAnswer
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("GET http://%s%s answered by one of the Service's pods %v", hostPort, path, pods),
		func(ctx context.Context) (bool, string) {
			a, err := lbGet(ctx, hostPort, path)
			if err != nil {
				return false, err.Error()
			}
			if msg := lbCheckServed(a, pods); msg != "" {
				return false, msg
			}
			ans = a
			return true, ""
		})
	return ans
}

// lbCheckServed says what is wrong with an answer that should come from
// one of pods ("" when nothing is).
func lbCheckServed(a httpAnswer, pods []string) string {
	if a.Status != http.StatusOK {
		return fmt.Sprintf("answer %d: %q", a.Status, lbShort(a.Body))
	}
	if _, ok := lbPodIn(a.Body, pods); !ok {
		return fmt.Sprintf("answer %q names none of the pods %v", lbShort(a.Body), pods)
	}
	return ""
}

func lbShort(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// lbUDPAsk sends msg from a fresh socket (so a load balancer opens a new
// flow) and returns the first answer.
func lbUDPAsk(ctx context.Context, hostPort, msg string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", hostPort)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(lbRequestTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	buf := make([]byte, 2048)
	// A datagram may be lost; resend a few times within the deadline.
	for {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", fmt.Errorf("send to udp %s: %w", hostPort, err)
		}
		_ = c.SetReadDeadline(minTime(deadline, time.Now().Add(time.Second)))
		n, err := c.Read(buf)
		if err == nil {
			return strings.TrimSpace(string(buf[:n])), nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !time.Now().Before(deadline) {
			return "", fmt.Errorf("no answer from udp %s: %w", hostPort, err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lbWaitUDPServed waits until a UDP "hostname" to hostPort is answered by
// one of pods and returns the answer.
func lbWaitUDPServed(ctx context.Context, t *T, hostPort string, pods []string) string {
	var answer string
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("UDP \"hostname\" to %s answered by one of the Service's pods %v", hostPort, pods),
		func(ctx context.Context) (bool, string) {
			a, err := lbUDPAsk(ctx, hostPort, "hostname")
			if err != nil {
				return false, err.Error()
			}
			if _, ok := lbPodIn(a, pods); !ok {
				return false, fmt.Sprintf("answer %q names none of the pods", lbShort(a))
			}
			answer = a
			return true, ""
		})
	return answer
}

// lbSourceAddr is the address the runner connects to hostPort from (no
// packet is sent).
func lbSourceAddr(hostPort string) (netip.Addr, error) {
	c, err := net.Dial("udp", hostPort)
	if err != nil {
		return netip.Addr{}, err
	}
	defer func() { _ = c.Close() }()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// --- the local cloud ---

// lbFind returns the load balancer made for svc: tagged with its UID, or
// named after its UID as upstream's DefaultLoadBalancerName does.
func lbFind(lbs []api.LoadBalancer, svc *corev1.Service) *api.LoadBalancer {
	name := cloud.LoadBalancerName(svc.UID)
	for i := range lbs {
		if lbs[i].Tags[local.TagServiceUID] == string(svc.UID) {
			return &lbs[i]
		}
	}
	for i := range lbs {
		if lbs[i].Name == name {
			return &lbs[i]
		}
	}
	return nil
}

// lbCloud returns svc's load balancer in the local cloud, nil when none.
func lbCloud(ctx context.Context, env *Env, svc *corev1.Service) (*api.LoadBalancer, error) {
	lbs, err := env.Cloud.ListLoadBalancers(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list the local cloud's load balancers: %w", err)
	}
	return lbFind(lbs, svc), nil
}

// lbWaitCloud waits until the local cloud has svc's load balancer and cond
// holds for it; it returns the load balancer.
func lbWaitCloud(ctx context.Context, t *T, svc *corev1.Service, timeout time.Duration, what string, cond func(*api.LoadBalancer) (bool, string)) *api.LoadBalancer {
	var found *api.LoadBalancer
	t.Eventually(ctx, timeout, fmt.Sprintf("the local cloud's load balancer of Service %s/%s (uid %s) %s", svc.Namespace, svc.Name, svc.UID, what),
		func(ctx context.Context) (bool, string) {
			lb, err := lbCloud(ctx, t.Env, svc)
			if err != nil {
				return false, err.Error()
			}
			if lb == nil {
				return false, fmt.Sprintf("no load balancer tagged %s=%s or named %s", local.TagServiceUID, svc.UID, cloud.LoadBalancerName(svc.UID))
			}
			found = lb
			if cond == nil {
				return true, ""
			}
			return cond(lb)
		})
	return found
}

// lbListener returns the load balancer's listener of proto and port.
func lbListener(lb *api.LoadBalancer, proto corev1.Protocol, port int32) (api.Listener, bool) {
	for _, l := range lb.Listeners {
		if strings.EqualFold(l.Protocol, string(proto)) && l.Port == int(port) {
			return l, true
		}
	}
	return api.Listener{}, false
}

// lbCheckListeners says which of the Service's ports the load balancer
// lacks a listener for, forwarding to the port's NodePort ("" if none).
func lbCheckListeners(lb *api.LoadBalancer, svc *corev1.Service) string {
	var missing []string
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		l, ok := lbListener(lb, proto, sp.Port)
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("no %s/%d listener", proto, sp.Port))
		case sp.NodePort != 0 && l.BackendPort != int(sp.NodePort):
			missing = append(missing, fmt.Sprintf("%s/%d listener forwards to port %d, not NodePort %d", proto, sp.Port, l.BackendPort, sp.NodePort))
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("%s; listeners %s", strings.Join(missing, ", "), lbDescribeListeners(lb))
}

func lbDescribeListeners(lb *api.LoadBalancer) string {
	var ls []string
	for _, l := range lb.Listeners {
		ls = append(ls, fmt.Sprintf("%s/%d→%d", l.Protocol, l.Port, l.BackendPort))
	}
	return "[" + strings.Join(ls, " ") + "]"
}

// lbBackendNames are the node names of a load balancer's backends.
func lbBackendNames(lb *api.LoadBalancer) []string {
	var names []string
	for _, b := range lb.Backends {
		if !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	sort.Strings(names)
	return names
}

// lbHealthyNames are the backends the data plane sends traffic to: checked
// at least once, healthy and not draining.
func lbHealthyNames(h *api.LoadBalancerHealth) []string {
	var names []string
	for _, b := range h.Backends {
		if b.Healthy && !b.Draining && !b.LastChecked.IsZero() && !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	sort.Strings(names)
	return names
}

// lbDescribeHealth shows each backend's health for a failure message.
func lbDescribeHealth(h *api.LoadBalancerHealth) string {
	var parts []string
	for _, b := range h.Backends {
		s := fmt.Sprintf("%s healthy=%v", b.Name, b.Healthy)
		if b.Draining {
			s += " draining"
		}
		if b.LastChecked.IsZero() {
			s += " unchecked"
		}
		if b.LastError != "" {
			s += " (" + b.LastError + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
