package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/pkg/providers/local"
)

// The demo: a Deployment behind a LoadBalancer Service with
// externalTrafficPolicy=Local, so the cloud's health checks (kube-proxy
// stand-ins answering from EndpointSlices) send traffic only to nodes
// that run its pods, and scaling the Deployment moves the traffic.
const (
	demoNamespace = "demo"
	demoService   = "hello"
	demoPort      = 8080
	demoReplicas  = 3
	demoScaledTo  = 1
	demoRequests  = 6
	// demoWait bounds each wait of the demo (pods, health checks, VIP).
	demoWait = time.Minute
)

// demo deploys (or finds, on a later run) the Deployment and Service,
// waits for the VIP, sends requests through it, scales the Deployment to
// one pod and shows the traffic follow. Without once it scales back and
// leaves the demo serving from every node with a pod.
func demo(ctx context.Context, p *progress, env *environment, once bool) error {
	svc, err := ensureDemo(ctx, env)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.step("demo", "Deployment %s/%s (%d replicas) behind LoadBalancer Service %s (port %d, externalTrafficPolicy Local); waiting for its VIP",
		demoNamespace, demoService, demoReplicas, demoService, demoPort)
	vip, err := waitIngress(ctx, env, demoWait)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.step("demo", "the ccm gave it VIP %s; the local cloud balances it over %d nodes, health-checking NodePort %d", vip, len(env.nodes), svc.Spec.HealthCheckNodePort)
	url := "http://" + net.JoinHostPort(vip, strconv.Itoa(demoPort)) + "/"
	if env.realNodes {
		url += "hostname" // agnhost netexec answers with the pod's name
	}
	show := func(replicas int32) error {
		nodes, err := waitDemoServing(ctx, env, replicas)
		if err != nil {
			return fmt.Errorf("demo: %w (see `%s status`)", err, selfName())
		}
		nodeOf := map[string]string{}
		if pods, _, err := demoPods(ctx, env); err == nil {
			for _, p := range pods {
				nodeOf[p.Name] = p.Spec.NodeName
			}
		}
		first, counts, err := requests(ctx, url, demoRequests, 30*time.Second, nodeOf)
		if err != nil {
			return fmt.Errorf("demo: GET %s: %w (see `%s status`)", url, err, selfName())
		}
		if replicas == demoReplicas {
			p.step("demo", "GET %s → %s", url, first)
		}
		p.step("demo", "%s ready on %s; the load balancer's healthy backends are exactly these nodes", plural(int(replicas), "pod"), strings.Join(nodes, ", "))
		p.step("demo", "%d requests answered by %s", demoRequests, counts)
		return nil
	}
	if err := show(demoReplicas); err != nil {
		return err
	}
	if env.networkProxy {
		if err := showLogs(ctx, p, env); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if err := showVolumeTopology(ctx, p, env); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.step("demo", "scaling %s to %d replica: the other pods stop, their nodes fail the health check, traffic follows", demoService, demoScaledTo)
	if err := scaleDemo(ctx, env, demoScaledTo); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := show(demoScaledTo); err != nil {
		return err
	}
	if once {
		return nil
	}
	p.step("demo", "scaling %s back to %d replicas", demoService, demoReplicas)
	if err := scaleDemo(ctx, env, demoReplicas); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	nodes, err := waitDemoServing(ctx, env, demoReplicas)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.step("demo", "%d pods ready again on %s", demoReplicas, strings.Join(nodes, ", "))
	return nil
}

// showLogs reads a demo pod's log as `kubectl logs` does: kube-apiserver
// reaches the node's kubelet through the network proxy (server, then the
// agent in the node's machine with real nodes, or of its zone).
func showLogs(ctx context.Context, p *progress, env *environment) error {
	running, _, err := demoPods(ctx, env)
	if err != nil || len(running) == 0 {
		return fmt.Errorf("no running pod to read logs of (%v)", err)
	}
	pod := running[0]
	agent := ""
	for _, n := range env.nodes {
		if n.name == pod.Spec.NodeName {
			agent = "agent-" + n.zone
			if env.realNodes {
				agent = "the agent on " + n.name
			}
		}
	}
	began := time.Now()
	data, err := env.client.CoreV1().Pods(demoNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "hello", TailLines: ptr.To[int64](1)}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("logs of pod %s through the network proxy: %w (see %s)", pod.Name, err, filepath.Join(env.logs(), "proxy-server.log"))
	}
	p.step("demo", "kubectl logs %s → %q in %s, through proxy-server and %s", pod.Name, strings.TrimSpace(string(data)), time.Since(began).Round(time.Millisecond), agent)
	return nil
}

func demoLabels() map[string]string { return map[string]string{"app": demoService} }

// ensureDemo creates the namespace, Deployment and Service, or brings an
// earlier run's back to the demo's spec.
func ensureDemo(ctx context.Context, env *environment) (*corev1.Service, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	spread := func(key string, when corev1.UnsatisfiableConstraintAction) corev1.TopologySpreadConstraint {
		return corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: when, LabelSelector: &metav1.LabelSelector{MatchLabels: demoLabels()}}
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoService},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](demoReplicas), Selector: &metav1.LabelSelector{MatchLabels: demoLabels()},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: demoLabels()}, Spec: corev1.PodSpec{
				// One pod per node while there are nodes enough, across zones:
				// the scheduler places them by the labels the CCM set.
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
					spread(corev1.LabelHostname, corev1.DoNotSchedule), spread(corev1.LabelTopologyZone, corev1.ScheduleAnyway)},
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers:                    []corev1.Container{demoContainer(env.realNodes)},
			}}},
	}
	if _, err := env.client.AppsV1().Deployments(demoNamespace).Create(ctx, dep, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		err = scaleDemo(ctx, env, demoReplicas)
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoService},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: demoLabels(),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: demoPort, TargetPort: intstr.FromString("http")}}},
	}
	created, err := env.client.CoreV1().Services(demoNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return created, err
	}
	old, err := env.client.CoreV1().Services(demoNamespace).Get(ctx, demoService, metav1.GetOptions{})
	if err != nil || old.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && old.Spec.Selector["app"] == demoService {
		return old, err
	}
	// A data directory of an earlier version: make it the demo's again.
	old.Spec.ExternalTrafficPolicy, old.Spec.Selector = corev1.ServiceExternalTrafficPolicyLocal, demoLabels()
	return env.client.CoreV1().Services(demoNamespace).Update(ctx, old, metav1.UpdateOptions{})
}

// scaleDemo sets the Deployment's replicas, again on a conflict (the
// deployment controller writes it too).
func scaleDemo(ctx context.Context, env *environment, replicas int32) error {
	deps := env.client.AppsV1().Deployments(demoNamespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := deps.GetScale(ctx, demoService, metav1.GetOptions{})
		if err != nil || scale.Spec.Replicas == replicas {
			return err
		}
		scale.Spec.Replicas = replicas
		_, err = deps.UpdateScale(ctx, demoService, scale, metav1.UpdateOptions{})
		return err
	})
}

// waitDemoServing waits until replicas pods run (and no others linger) and
// the load balancer's healthy backends are exactly the nodes that run
// them; it returns those nodes with their pods.
func waitDemoServing(ctx context.Context, env *environment, replicas int32) ([]string, error) {
	deadline := time.Now().Add(demoWait)
	var last string
	for {
		running, others, err := demoPods(ctx, env)
		if err == nil {
			want := podNodes(running)
			healthy, lbErr := healthyBackends(ctx, env)
			published, epErr := readyEndpointIPs(ctx, env)
			switch {
			case lbErr != nil || epErr != nil:
				last = errors.Join(lbErr, epErr).Error()
			case len(running) != int(replicas) || others > 0:
				last = fmt.Sprintf("%d of %d pods running, %d starting or stopping", len(running), replicas, others)
			case !slices.Equal(published, podIPs(running)):
				last = fmt.Sprintf("ready endpoints %v, running pods %v", published, podIPs(running))
			case !slices.Equal(healthy, want):
				last = fmt.Sprintf("healthy backends %v, nodes with pods %v", healthy, want)
			default:
				return describePods(running), nil
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not serving from its pods' nodes after %v: %s", demoWait, last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoPods returns the demo's running, ready pods and how many others
// (pending, or being deleted) exist.
func demoPods(ctx context.Context, env *environment) ([]corev1.Pod, int, error) {
	list, err := env.client.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + demoService})
	if err != nil {
		return nil, 0, err
	}
	var running []corev1.Pod
	others := 0
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && podReady(&pod) {
			running = append(running, pod)
		} else {
			others++
		}
	}
	return running, others, nil
}

func podIPs(pods []corev1.Pod) []string {
	var ips []string
	for _, pod := range pods {
		ips = append(ips, pod.Status.PodIP)
	}
	slices.Sort(ips)
	return ips
}

// readyEndpointIPs are the ready addresses of the demo Service's
// EndpointSlices, which kube-proxy (here its stand-ins) serves from.
func readyEndpointIPs(ctx context.Context, env *environment) ([]string, error) {
	list, err := env.client.DiscoveryV1().EndpointSlices(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + demoService})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && len(e.Addresses) > 0 && !slices.Contains(ips, e.Addresses[0]) {
				ips = append(ips, e.Addresses[0])
			}
		}
	}
	slices.Sort(ips)
	return ips, nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNodes(pods []corev1.Pod) []string {
	var nodes []string
	for _, pod := range pods {
		if !slices.Contains(nodes, pod.Spec.NodeName) {
			nodes = append(nodes, pod.Spec.NodeName)
		}
	}
	slices.SortFunc(nodes, compareNodeNames)
	return nodes
}

// describePods names each node with its pods: "node-1 (hello-7d9-abcde)".
func describePods(pods []corev1.Pod) []string {
	byNode := map[string][]string{}
	for _, pod := range pods {
		byNode[pod.Spec.NodeName] = append(byNode[pod.Spec.NodeName], pod.Name)
	}
	var out []string
	for _, node := range podNodes(pods) {
		out = append(out, fmt.Sprintf("%s (%s)", node, strings.Join(byNode[node], ", ")))
	}
	return out
}

// healthyBackends are the nodes the demo's load balancer sends traffic
// to, as its data plane's health checks see them.
func healthyBackends(ctx context.Context, env *environment) ([]string, error) {
	lbs, err := env.cloudClient.ListLoadBalancers(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, lb := range lbs {
		if lb.Tags[local.TagServiceName] != demoNamespace+"/"+demoService {
			continue
		}
		h, err := env.cloudClient.LoadBalancerHealth(ctx, lb.Name)
		if err != nil {
			return nil, err
		}
		var nodes []string
		for _, b := range h.Backends {
			// Not yet checked counts as not known to be healthy.
			if b.Healthy && !b.Draining && !b.LastChecked.IsZero() {
				nodes = append(nodes, b.Name)
			}
		}
		slices.SortFunc(nodes, compareNodeNames)
		return nodes, nil
	}
	return nil, errors.New("the cloud has no load balancer for the Service yet")
}

// waitIngress waits for the Service's load-balancer ingress; on timeout it
// names the Service's latest warning event, where the ccm says what failed.
func waitIngress(ctx context.Context, env *environment, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		svc, err := env.client.CoreV1().Services(demoNamespace).Get(ctx, demoService, metav1.GetOptions{})
		if err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
			return svc.Status.LoadBalancer.Ingress[0].IP, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no load-balancer ingress after %v (%s)", timeout, lastServiceWarning(ctx, env))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func lastServiceWarning(ctx context.Context, env *environment) string {
	list, err := env.client.CoreV1().Events(demoNamespace).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", demoService), fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()})
	if err != nil || len(list.Items) == 0 {
		return "no warning events; see the ccm log in " + env.logs()
	}
	e := list.Items[len(list.Items)-1]
	return "last warning: " + e.Reason + ": " + e.Message
}

// requests sends n GETs through the VIP (retrying until the first succeeds)
// and returns the first answer and which node and pod answered how often.
func requests(ctx context.Context, url string, n int, timeout time.Duration, nodeOf map[string]string) (string, string, error) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(timeout)
	var first string
	counts := map[string]int{}
	for sum(counts) < n {
		node, pod, body, err := get(ctx, hc, url, nodeOf)
		if err != nil {
			if time.Now().After(deadline) {
				return "", "", err
			}
			select {
			case <-ctx.Done():
				return "", "", ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if first == "" {
			first = fmt.Sprintf("200 OK from %s: %q", node, body)
		}
		counts[node+"/"+pod]++
	}
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return compareNodeNames(names[i], names[j]) < 0 })
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s (%d)", name, counts[name])
	}
	return first, strings.Join(parts, ", "), nil
}

// get sends one request; the kube-proxy stand-in names the node that took
// it (X-Node) and the pod that served it (X-Pod). A real pod (agnhost
// netexec's /hostname) answers with its name; nodeOf gives its node.
func get(ctx context.Context, hc *http.Client, url string, nodeOf map[string]string) (node, pod, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", "", "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", "", "", err
	}
	if name := strings.TrimSpace(string(data)); resp.StatusCode == http.StatusOK && resp.Header.Get("X-Node") == "" && nodeOf[name] != "" {
		return nodeOf[name], name, name, nil
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Node") == "" {
		return "", "", "", errors.New("unexpected answer: " + resp.Status)
	}
	_, podName, _ := strings.Cut(resp.Header.Get("X-Pod"), "/")
	return resp.Header.Get("X-Node"), podName, strings.TrimSpace(string(data)), nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

// demoContainer is the demo's HTTP server: on real nodes agnhost netexec
// (built from source, pulled through the cloud registry's mirror of
// registry.k8s.io); on simulated ones an image no kubelet pulls, whose
// answers the kube-proxy stand-ins give.
func demoContainer(real bool) corev1.Container {
	c := corev1.Container{Name: "hello", Image: "registry.portside.local/hello:1",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: demoPort}}}
	if real {
		c.Image, c.Args = nodeimages.AgnhostImage, []string{"netexec", fmt.Sprintf("--http-port=%d", demoPort)}
	}
	return c
}
