package realnode_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/testenv"
)

// spreadNetexec runs app: two agnhost netexec pods (HTTP on 8080), one
// per node, and returns them once both are ready and ok says their
// addresses are what the test wants (what says what that is).
func spreadNetexec(t *testing.T, kube kubernetes.Interface, ns, app, what string, ok func(corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": app}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptrTo[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
			Containers: []corev1.Container{{Name: "netexec", Image: nodeimages.AgnhostImage, Args: []string{"netexec", "--http-port=8080"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}},
		}},
	}}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	testenv.Eventually(t, 3*time.Minute, "2 ready pods "+what+", on both nodes", func() (bool, string) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err.Error()
		}
		pods = nil
		on := map[string]bool{}
		for _, p := range list.Items {
			if podIsReady(&p) && ok(p) {
				pods = append(pods, p)
				on[p.Spec.NodeName] = true
			}
		}
		return len(pods) == 2 && len(on) == 2, fmt.Sprintf("%d ready %s on %v", len(pods), what, on)
	})
	return pods
}

// answeredByAll waits until url (a fresh connection each time) has been
// answered by each of names.
func answeredByAll(t *testing.T, url string, names []string) {
	t.Helper()
	answered := map[string]bool{}
	testenv.Eventually(t, time.Minute, fmt.Sprintf("all of %v answering %s from the host", names, url), func() (bool, string) {
		body, err := getFresh(url)
		if err != nil {
			return false, err.Error()
		}
		if !slices.Contains(names, strings.TrimSpace(body)) {
			return false, "answered by " + body
		}
		answered[strings.TrimSpace(body)] = true
		return len(answered) == len(names), fmt.Sprint(answered)
	})
}
