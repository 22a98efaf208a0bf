package nodeipam

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNeedsAllocation(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name string
		node corev1.Node
		want bool
	}{
		{"new node", corev1.Node{}, true},
		{"has podCIDRs", corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24"}}}, false},
		{"has only the legacy podCIDR", corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}}, false},
		{"being deleted", corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now, Finalizers: []string{"x"}}}, false},
	}
	for _, tc := range cases {
		if got := NeedsAllocation(&tc.node); got != tc.want {
			t.Errorf("%s: NeedsAllocation = %v, want %v", tc.name, got, tc.want)
		}
	}
}
