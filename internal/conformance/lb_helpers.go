package conformance

import (
	"context"
	"fmt"
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
