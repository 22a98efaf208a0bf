package conformance

import (
	"github.com/portside-io/portside/internal/nodeimages"

	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestImage is the image of the pods the suite runs: agnhost at the tag of
// the pinned Kubernetes (upstream's e2e tests at KUBE_VERSION use it too),
// which `portside up` builds from source for real nodes; any other tag
// would be an image its nodes cannot pull.
const TestImage = nodeimages.AgnhostImage

func networkProxyTest() Test {
	return Test{
		Name:    "network-proxy/logs",
		Needs:   []Capability{NetworkProxy},
		Timeout: 3 * time.Minute,
		Run: func(ctx context.Context, t *T) {
			pods := t.Env.Client.CoreV1().Pods(t.Env.Namespace)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "logs", Labels: map[string]string{RunLabel: t.Env.RunID}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "netexec", Image: TestImage, Args: []string{"netexec", "--http-port=8080"},
					}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			}
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod %s/%s: %v", t.Env.Namespace, pod.Name, err)
			}
			t.Cleanup(func(ctx context.Context) {
				if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("clean-up: delete pod %s/%s: %v", t.Env.Namespace, pod.Name, err)
				}
			})
			var node string
			t.Eventually(ctx, 2*time.Minute, fmt.Sprintf("pod %s/%s to run", t.Env.Namespace, pod.Name), func(ctx context.Context) (bool, string) {
				p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				node = p.Spec.NodeName
				if p.Status.Phase != corev1.PodRunning {
					return false, fmt.Sprintf("phase %s on node %q (%s)", p.Status.Phase, p.Spec.NodeName, podConditions(p))
				}
				return true, ""
			})
			t.Logf("pod %s/%s runs on node %s", t.Env.Namespace, pod.Name, node)
			var logs []byte
			start := time.Now()
			t.Eventually(ctx, time.Minute, fmt.Sprintf("the apiserver to reach the kubelet of node %s (pods/log; through its egress, the network proxy when configured)", node),
				func(ctx context.Context) (bool, string) {
					b, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
					if err != nil {
						return false, fmt.Sprintf("the apiserver could not reach the kubelet of node %s: %v", node, err)
					}
					logs = b
					return true, ""
				})
			t.Logf("read %d bytes of logs through the apiserver in %v", len(logs), time.Since(start).Round(time.Millisecond))
		},
	}
}

func podConditions(p *corev1.Pod) string {
	s := ""
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			s += fmt.Sprintf("%s=%s %s %s; ", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf("container %s waiting: %s %s; ", cs.Name, w.Reason, w.Message)
		}
	}
	return s
}
