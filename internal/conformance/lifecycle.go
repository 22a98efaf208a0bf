package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodeDeletionTimeout bounds the wait for the cloud node lifecycle
// controller to delete a Node whose instance is gone (it checks every
// --node-monitor-period, 5 s upstream).
const nodeDeletionTimeout = 2 * time.Minute

func nodeLifecycleTest() Test {
	return Test{
		Name:    "nodes/lifecycle",
		Needs:   []Capability{Instances, InstanceDeletion},
		Timeout: 5 * time.Minute,
		Run: func(ctx context.Context, t *T) {
			tn := newTestNode(ctx, t, "gone")
			node := tn.waitInitialized(ctx, t)
			deleteInstance(ctx, t, tn, node.Spec.ProviderID)

			// The kubelet died with its machine: kube-controller-manager
			// marks the node NotReady once its heartbeats stop. Do it now
			// rather than wait for the grace period; the CCM deletes only
			// NotReady nodes.
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
				Message: "Kubelet stopped posting node status (conformance suite).", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}}}})
			if _, err := t.Env.Client.CoreV1().Nodes().Patch(ctx, tn.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("mark node %s NotReady: %v", tn.name, err)
			}
			start := time.Now()
			t.Eventually(ctx, nodeDeletionTimeout, fmt.Sprintf("the cloud node lifecycle controller to delete node %s, whose instance is gone", tn.name),
				func(ctx context.Context) (bool, string) {
					n, err := t.Env.Client.CoreV1().Nodes().Get(ctx, tn.name, metav1.GetOptions{})
					if apierrors.IsNotFound(err) {
						return true, ""
					}
					if err != nil {
						return false, err.Error()
					}
					if n.DeletionTimestamp != nil {
						return false, "the node is being deleted (finalizers " + strings.Join(n.Finalizers, ",") + ")"
					}
					return false, "the node still exists (NotReady, instance deleted)"
				})
			t.Logf("node %s deleted %v after its instance", tn.name, time.Since(start).Round(time.Millisecond))
		},
	}
}

// deleteInstance deletes the node's instance with --instance-hook when
// given, else with the local cloud's API.
func deleteInstance(ctx context.Context, t *T, tn *testNode, providerID string) {
	if hook := t.Env.InstanceHook; len(hook) > 0 {
		cmd := exec.CommandContext(ctx, hook[0], append(hook[1:], providerID)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("--instance-hook %s %s: %v: %s", strings.Join(hook, " "), providerID, err, strings.TrimSpace(out.String()))
		}
		t.Logf("instance %s deleted by --instance-hook", providerID)
		return
	}
	if err := t.Env.Cloud.DeleteInstance(ctx, tn.inst.ID); err != nil {
		t.Fatalf("delete instance %s (%s): %v", tn.name, tn.inst.ID, err)
	}
	t.Logf("instance %s (%s) deleted with the cloud's API", tn.name, tn.inst.ID)
}
