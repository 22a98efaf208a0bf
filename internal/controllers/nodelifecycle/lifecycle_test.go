package nodelifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func node(ready bool, shutdownTaint bool) *corev1.Node {
	n := &corev1.Node{}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	if shutdownTaint {
		n.Spec.Taints = []corev1.Taint{{Key: TaintShutdown, Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name             string
		node             *corev1.Node
		exists, shutdown bool
		want             Action
	}{
		{"ready, untainted", node(true, false), true, false, Nothing},
		{"ready, tainted: instance back", node(true, true), true, false, RemoveShutdownTaint},
		{"ready but gone: readiness wins, no deletion", node(true, false), false, false, Nothing},
		{"not ready, gone", node(false, false), false, false, DeleteNode},
		{"not ready, stopped", node(false, false), true, true, AddShutdownTaint},
		{"not ready, stopped, already tainted", node(false, true), true, true, Nothing},
		{"not ready, running", node(false, false), true, false, Nothing},
		{"no Ready condition, gone", &corev1.Node{}, false, false, DeleteNode},
	}
	for _, tc := range cases {
		if got := Decide(tc.node, tc.exists, tc.shutdown); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
