package nodesim

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A realistic node is as big as real ones (10-20 KB of JSON) and keeps
// what the controllers read: the taint, the addresses and Ready.
func TestMakeRealistic(t *testing.T) {
	spec := NodeSpec{Name: "node-a", NodeIPs: []string{"10.0.0.1"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: map[string]string{}}}
	node.Status = nodeStatus(spec)
	plain, _ := json.Marshal(node)
	makeRealistic(node)
	big, _ := json.Marshal(node)
	if len(big) < 10_000 || len(big) > 20_000 {
		t.Errorf("realistic node is %d bytes of JSON, want 10-20 KB (plain: %d)", len(big), len(plain))
	}
	if len(node.Status.Images) != RealisticImages || len(node.Status.Conditions) != 4 {
		t.Errorf("images %d, conditions %d", len(node.Status.Images), len(node.Status.Conditions))
	}
	if node.Status.Conditions[0].Type != corev1.NodeReady || node.Status.Addresses[0].Address != "10.0.0.1" {
		t.Errorf("realistic node lost what controllers read: %+v", node.Status)
	}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Labels: map[string]string{}}}
	makeRealistic(other)
	if other.Status.NodeInfo.MachineID == node.Status.NodeInfo.MachineID {
		t.Error("two nodes share a machine ID")
	}
}
