package conformance

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The helpers of the upstream scenarios (lb_upstream.go): requests, waits,
// and the decisions, pure, with their tables in lb_upstream_test.go.

// lbuCheckNoLB: a Service of a type without a load balancer has no
// ingress, no cleanup finalizer and, with the local cloud, no load balancer.
func lbuCheckNoLB(ctx context.Context, t *T, svc *corev1.Service, typ string) {
	if ing := lbIngressAddrs(svc); len(ing) > 0 || slices.Contains(svc.Finalizers, lbFinalizer) {
		t.Errorf("Service %s/%s of type %s has ingress %v, finalizers %v", svc.Namespace, svc.Name, typ, ing, svc.Finalizers)
	}
	if t.Env.Cloud == nil {
		return
	}
	if lb, err := lbCloud(ctx, t.Env, svc); err != nil {
		t.Errorf("%v", err)
	} else if lb != nil {
		t.Errorf("the local cloud has load balancer %s for Service %s/%s of type %s", lb.Name, svc.Namespace, svc.Name, typ)
	}
}

// lbuIngressNow is the Service's ingress as the API has it now.
func lbuIngressNow(ctx context.Context, t *T, name string) []string {
	svc, err := t.Env.Client.CoreV1().Services(t.Env.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Service %s/%s: %v", t.Env.Namespace, name, err)
	}
	return lbIngressAddrs(svc)
}

// lbuAsk sends one request of proto ("hostname") and returns the answer.
func lbuAsk(ctx context.Context, proto corev1.Protocol, hp string) (string, error) {
	if proto == corev1.ProtocolUDP {
		return lbUDPAsk(ctx, hp, "hostname")
	}
	a, err := lbGet(ctx, hp, "/hostname")
	if err == nil && a.Status != http.StatusOK {
		err = fmt.Errorf("answer %d: %q", a.Status, lbShort(a.Body))
	}
	return a.Body, err
}

func lbuWaitServed(ctx context.Context, t *T, proto corev1.Protocol, hp string, pods []string) string {
	if proto == corev1.ProtocolUDP {
		return lbWaitUDPServed(ctx, t, hp, pods)
	}
	return lbWaitServed(ctx, t, hp, "/hostname", pods).Body
}

// lbuWaitNotServed waits until 3 requests in a row to hp get no answer.
func lbuWaitNotServed(ctx context.Context, t *T, proto corev1.Protocol, hp, what string) {
	fails := 0
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("3 %s requests in a row to %s unanswered (%s)", proto, hp, what), func(ctx context.Context) (bool, string) {
		a, err := lbuAsk(ctx, proto, hp)
		if err != nil {
			fails++
			return fails >= 3, ""
		}
		fails = 0
		return false, fmt.Sprintf("still answered: %q", lbShort(a))
	})
}

// lbuEditDeployment applies change to the Deployment name, again on a
// conflict.
func lbuEditDeployment(ctx context.Context, t *T, name string, change func(*appsv1.Deployment)) {
	deps := t.Env.Client.AppsV1().Deployments(t.Env.Namespace)
	for range 10 {
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Deployment %s/%s: %v", t.Env.Namespace, name, err)
		}
		change(d)
		if _, err = deps.Update(ctx, d, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatalf("update Deployment %s/%s: %v", t.Env.Namespace, name, err)
		}
	}
	t.Fatalf("update Deployment %s/%s: conflicts 10 times", t.Env.Namespace, name)
}

func lbuWaitRollout(ctx context.Context, t *T, name string) {
	t.Eventually(ctx, lbPodsTimeout, fmt.Sprintf("the rollout of Deployment %s/%s", t.Env.Namespace, name), func(ctx context.Context) (bool, string) {
		d, err := t.Env.Client.AppsV1().Deployments(t.Env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return lbuRolloutDone(d)
	})
}

// lbuWaitPodOn waits until the Deployment name's one pod runs, ready, on
// node, and no other pod of it is left.
func lbuWaitPodOn(ctx context.Context, t *T, name, node string) corev1.Pod {
	env := t.Env
	var pod corev1.Pod
	t.Eventually(ctx, lbPodsTimeout, fmt.Sprintf("the one pod of Deployment %s/%s ready on node %s", env.Namespace, name, node), func(ctx context.Context) (bool, string) {
		list, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "list pods: " + err.Error()
		}
		var states []string
		for _, p := range list.Items {
			states = append(states, fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, lbPodState(&p)))
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("pods %v", states)
		}
		pod = list.Items[0]
		return pod.DeletionTimestamp == nil && pod.Spec.NodeName == node && lbPodReady(&pod), fmt.Sprintf("pods %v", states)
	})
	return pod
}

func lbuSchedulableNodes(ctx context.Context, t *T) []corev1.Node {
	list, err := t.Env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list Nodes: %v", err)
	}
	return slices.DeleteFunc(list.Items, func(n corev1.Node) bool { return !lbuSchedulable(&n) })
}

func lbuNodeNames(nodes []corev1.Node) []string {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return names
}

// --- decisions (pure) ---

// lbuBackendKey names what served an answer, for session affinity: the pod
// agnhost names. The kube-proxy stand-ins of `portside up` (X-Pod set)
// round-robin a node's pods whatever the Service's affinity, so for them
// the key is the node (X-Node), where the load balancer's affinity sends
// a client.
func lbuBackendKey(a httpAnswer, pods []string) (string, bool) {
	if lbCheckServed(a, pods) != "" {
		return "", false
	}
	if a.Pod != "" && a.Node != "" {
		return "node " + a.Node, true
	}
	pod, _ := lbPodIn(a.Body, pods)
	return "pod " + pod, true
}

// lbuAffinityVerdict: with affinity all keys are one backend; without, at
// least two backends answered. detail counts answers per backend.
func lbuAffinityVerdict(keys []string, affinity bool) (bool, string) {
	count := map[string]int{}
	for _, k := range keys {
		count[k]++
	}
	names := slices.Sorted(maps.Keys(count))
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	detail := "[" + strings.Join(parts, ", ") + "]"
	if len(keys) == 0 {
		return false, "no answers"
	}
	if affinity {
		return len(count) == 1, detail
	}
	return len(count) >= 2, detail
}

// lbuRolloutDone reports whether a Deployment finished rolling out: its
// controller saw the latest spec and every replica is updated and
// available, with no old one left.
func lbuRolloutDone(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	detail := fmt.Sprintf("generation %d observed %d; replicas %d, updated %d, available %d, want %d", d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want)
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want, detail
}

// lbuEndpointNodes are the nodes with a ready endpoint in slices (an
// unset condition means ready, as kube-proxy reads it), sorted.
func lbuEndpointNodes(items []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range items {
		for _, e := range s.Endpoints {
			if e.NodeName != nil && (e.Conditions.Ready == nil || *e.Conditions.Ready) && !slices.Contains(out, *e.NodeName) {
				out = append(out, *e.NodeName)
			}
		}
	}
	sort.Strings(out)
	return out
}

// lbuSchedulable: a Ready node new pods may land on and load balancers use.
func lbuSchedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable || n.Labels[lbExcludeLabel] != "" {
		return false
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// lbuOtherNode picks, by name, a node of nodes other than current.
func lbuOtherNode(nodes []corev1.Node, current string) (string, bool) {
	names := lbuNodeNames(nodes)
	sort.Strings(names)
	for _, n := range names {
		if n != current {
			return n, true
		}
	}
	return "", false
}

// lbuPodOf returns the pod of Deployment dep an answer names: a word of
// body (between characters no pod name has) starting with "<dep>-".
func lbuPodOf(body, dep string) (string, bool) {
	for _, w := range strings.FieldsFunc(body, func(r rune) bool { return r > 0x7f || !nameChar(byte(r)) }) {
		if strings.HasPrefix(w, dep+"-") && len(w) > len(dep)+1 {
			return strings.TrimRight(w, "."), true
		}
	}
	return "", false
}

// lbuMovedOn judges one flow's answers after its pod old was replaced
// ("" for no answer): done once the last n came from one pod other than
// old.
func lbuMovedOn(history []string, old string, n int) (bool, string) {
	detail := fmt.Sprintf("answers %q", lbuTail(history, 2*n))
	if len(history) < n {
		return false, detail
	}
	last := history[len(history)-n:]
	if last[0] == "" || last[0] == old {
		return false, detail
	}
	for _, p := range last {
		if p != last[0] {
			return false, detail
		}
	}
	return true, detail
}

func lbuTail(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
