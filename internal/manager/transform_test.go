package manager

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTrimForCache(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "ready"}
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	tests := []struct {
		name  string
		in    any
		check func(t *testing.T, out any)
	}{{
		name: "node keeps metadata, spec, addresses and conditions",
		in: &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"}, ManagedFields: managed},
			Spec:       corev1.NodeSpec{ProviderID: "local://i", Taints: []corev1.Taint{{Key: "t"}}, PodCIDRs: []string{"10.244.0.0/24"}},
			Status: corev1.NodeStatus{Addresses: addrs, Conditions: []corev1.NodeCondition{cond}, Phase: corev1.NodeRunning,
				Images: []corev1.ContainerImage{{Names: []string{"img"}}}, NodeInfo: corev1.NodeSystemInfo{MachineID: "m"},
				Capacity: corev1.ResourceList{corev1.ResourceCPU: {}}, VolumesInUse: []corev1.UniqueVolumeName{"v"}},
		},
		check: func(t *testing.T, out any) {
			n := out.(*corev1.Node)
			if n.ManagedFields != nil || n.Status.Images != nil || n.Status.NodeInfo.MachineID != "" || n.Status.Capacity != nil || n.Status.VolumesInUse != nil {
				t.Errorf("not trimmed: %+v", n)
			}
			if n.Labels["l"] != "1" || n.Annotations["a"] != "1" || n.Spec.ProviderID != "local://i" || len(n.Spec.Taints) != 1 || len(n.Spec.PodCIDRs) != 1 {
				t.Errorf("metadata or spec lost: %+v", n)
			}
			if len(n.Status.Addresses) != 1 || len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Reason != "KubeletReady" || n.Status.Phase != corev1.NodeRunning {
				t.Errorf("addresses or conditions lost: %+v", n.Status)
			}
			if n.Status.Conditions[0].Message != "" {
				t.Errorf("condition message kept")
			}
		},
	}, {
		name: "service drops managedFields and kubectl's last-applied copy, keeps other annotations",
		in: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: managed, Finalizers: []string{"f"},
			Annotations: map[string]string{annotationLastApplied: "{...}", "service.beta.kubernetes.io/x": "y"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}},
		check: func(t *testing.T, out any) {
			s := out.(*corev1.Service)
			if s.ManagedFields != nil || s.Annotations[annotationLastApplied] != "" {
				t.Errorf("not trimmed: %+v", s.ObjectMeta)
			}
			if s.Annotations["service.beta.kubernetes.io/x"] != "y" || len(s.Finalizers) != 1 || s.Spec.Type != corev1.ServiceTypeLoadBalancer {
				t.Errorf("lost what the controller reads: %+v", s)
			}
		},
	}, {
		name: "service without annotations",
		in:   &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
		check: func(t *testing.T, out any) {
			if out.(*corev1.Service).Annotations != nil {
				t.Error("annotations map created")
			}
		},
	}, {
		name: "other objects lose only managedFields",
		in:   &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: managed}, Spec: corev1.PodSpec{NodeName: "n"}},
		check: func(t *testing.T, out any) {
			p := out.(*corev1.Pod)
			if p.ManagedFields != nil || p.Spec.NodeName != "n" {
				t.Errorf("%+v", p)
			}
		},
	}, {
		name:  "a tombstone passes through",
		in:    "not an object",
		check: func(t *testing.T, out any) {},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := trimForCache(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, out)
		})
	}
}
