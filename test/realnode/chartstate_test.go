package realnode_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// chartState describes what a roll of the chart left in namespace ns, for
// the failure message when helm's wait ends without it done (a run that
// times out removes its data directory, so this is all that is left to
// read): each pod's node, phase, readiness and waiting or terminated
// containers, the rollouts' counts and the namespace's last warnings.
func chartState(kube kubernetes.Interface, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("(pods of %s: %v)", ns, err)
	}
	for _, p := range pods.Items {
		ready := "not ready"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = "ready"
			}
		}
		fmt.Fprintf(&b, "pod %s on %s: %s, %s", p.Name, p.Spec.NodeName, p.Status.Phase, ready)
		if p.DeletionTimestamp != nil {
			fmt.Fprintf(&b, ", terminating since %s", p.DeletionTimestamp.Format(time.TimeOnly))
		}
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				fmt.Fprintf(&b, "; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				fmt.Fprintf(&b, "; %s terminated: %s (exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
			}
			if c.RestartCount > 0 {
				fmt.Fprintf(&b, "; %s restarted %d times", c.Name, c.RestartCount)
			}
		}
		b.WriteString("\n")
	}
	if deps, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range deps.Items {
			fmt.Fprintf(&b, "deployment %s: %d updated, %d ready, %d available of %d\n", d.Name, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas, d.Status.Replicas)
		}
	}
	if dss, err := kube.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range dss.Items {
			fmt.Fprintf(&b, "daemonset %s: %d updated, %d ready, %d available of %d desired\n", d.Name, d.Status.UpdatedNumberScheduled, d.Status.NumberReady, d.Status.NumberAvailable, d.Status.DesiredNumberScheduled)
		}
	}
	if evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		warnings := slices.DeleteFunc(evs.Items, func(e corev1.Event) bool { return e.Type != corev1.EventTypeWarning })
		slices.SortFunc(warnings, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
		for _, e := range warnings[max(0, len(warnings)-15):] {
			fmt.Fprintf(&b, "event %s %s/%s: %s: %s (×%d)\n", e.LastTimestamp.Format(time.TimeOnly), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
		}
	}
	return b.String()
}
