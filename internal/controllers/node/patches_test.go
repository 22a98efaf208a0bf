package node

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// InitPatches are applied the way the apiserver applies them (client-go's
// fake tracker uses the same json-patch library) to the node they were
// decided from, and to one that changed in between.
func TestInitPatches(t *testing.T) {
	uninit := corev1.Taint{Key: TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	other := corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}
	host := corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n"}
	base := func() *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/hostname": "n"}},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{uninit, other}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{host}, Images: []corev1.ContainerImage{{Names: []string{"img"}}}}}
	}
	decision := &Initialization{ProviderID: "local://i-1", Labels: map[string]string{"topology.kubernetes.io/zone": "a", "a~b/c": "x"},
		Addresses: []corev1.NodeAddress{internal, host}, AddressesChanged: true, Taints: []corev1.Taint{other}}
	tests := []struct {
		name string
		// decidedFrom is the cached node; live is what the apiserver has.
		decidedFrom, live func() *corev1.Node
		d                 *Initialization
		wantStatusFailed  bool
		wantMainFailed    bool
	}{{
		name: "unchanged node", decidedFrom: base, live: base, d: decision,
	}, {
		name: "another controller wrote a condition in between: no conflict", decidedFrom: base,
		live: func() *corev1.Node {
			n := base()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse}}
			n.Annotations = map[string]string{"other": "1"}
			return n
		}, d: decision,
	}, {
		name: "taints changed in between: the node patch fails", decidedFrom: base,
		live: func() *corev1.Node {
			n := base()
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "new", Effect: corev1.TaintEffectNoExecute})
			return n
		}, d: decision, wantMainFailed: true,
	}, {
		name: "already initialized (taint gone): the node patch fails", decidedFrom: base,
		live: func() *corev1.Node {
			n := base()
			n.Spec.Taints = []corev1.Taint{other}
			return n
		}, d: decision, wantMainFailed: true,
	}, {
		name: "addresses changed in between: the status patch fails", decidedFrom: base,
		live: func() *corev1.Node {
			n := base()
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.9.9"}, host}
			return n
		}, d: decision, wantStatusFailed: true,
	}, {
		name: "no labels map, addresses unchanged, last taint removed",
		decidedFrom: func() *corev1.Node {
			n := base()
			n.Labels, n.Spec.Taints = nil, []corev1.Taint{uninit}
			return n
		},
		live: func() *corev1.Node {
			n := base()
			n.Labels, n.Spec.Taints = nil, []corev1.Taint{uninit}
			return n
		},
		d: &Initialization{Labels: map[string]string{"l": "v"}, Addresses: []corev1.NodeAddress{host}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.live())
			status, main, err := InitPatches(tc.decidedFrom(), tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if (status != nil) != tc.d.AddressesChanged {
				t.Fatalf("status patch %s with AddressesChanged=%v", status, tc.d.AddressesChanged)
			}
			ctx := context.Background()
			if status != nil {
				_, err := client.CoreV1().Nodes().Patch(ctx, "n", types.JSONPatchType, status, metav1.PatchOptions{}, "status")
				if failed := err != nil; failed != tc.wantStatusFailed {
					t.Fatalf("status patch %s: err %v, want failed=%v", status, err, tc.wantStatusFailed)
				}
				if err != nil {
					return
				}
			}
			_, err = client.CoreV1().Nodes().Patch(ctx, "n", types.JSONPatchType, main, metav1.PatchOptions{})
			if failed := err != nil; failed != tc.wantMainFailed {
				t.Fatalf("node patch %s: err %v, want failed=%v", main, err, tc.wantMainFailed)
			}
			if err != nil {
				return
			}
			got, _ := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
			want := tc.live()
			if tc.d.AddressesChanged {
				want.Status.Addresses = tc.d.Addresses
			}
			if want.Labels == nil {
				want.Labels = map[string]string{}
			}
			for k, v := range tc.d.Labels {
				want.Labels[k] = v
			}
			if tc.d.ProviderID != "" {
				want.Spec.ProviderID = tc.d.ProviderID
			}
			want.Spec.Taints = tc.d.Taints
			if len(want.Spec.Taints) == 0 {
				want.Spec.Taints = nil
			}
			if len(got.Spec.Taints) == 0 {
				got.Spec.Taints = nil
			}
			got.ResourceVersion = ""
			if !equalNodes(got, want) {
				t.Errorf("after the patches:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// equalNodes compares what the patches write or must keep. Taints are
// compared by content, in order: a patch that leaves the uninitialized
// taint and drops another one keeps their count.
func equalNodes(a, b *corev1.Node) bool {
	return a.Spec.ProviderID == b.Spec.ProviderID && equalTaints(a.Spec.Taints, b.Spec.Taints) &&
		mapsEqual(a.Labels, b.Labels) && mapsEqual(a.Annotations, b.Annotations) &&
		len(a.Status.Images) == len(b.Status.Images) && equalConditions(a.Status.Conditions, b.Status.Conditions) &&
		equalAddresses(a.Status.Addresses, b.Status.Addresses)
}

func equalTaints(a, b []corev1.Taint) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Taint) bool {
		return x.Key == y.Key && x.Value == y.Value && x.Effect == y.Effect
	})
}

func equalConditions(a, b []corev1.NodeCondition) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.NodeCondition) bool { return x.Type == y.Type && x.Status == y.Status })
}

// TestEqualNodesComparesTaintContents: the comparison of TestInitPatches
// tells taints apart by key, value and effect, not only by count.
func TestEqualNodesComparesTaintContents(t *testing.T) {
	node := func(taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	want := corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	if !equalNodes(node(want), node(want)) {
		t.Fatal("equal nodes compare unequal")
	}
	for name, got := range map[string]corev1.Taint{
		"key":    {Key: TaintUninitialized, Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		"value":  {Key: want.Key, Value: "cpu", Effect: corev1.TaintEffectNoSchedule},
		"effect": {Key: want.Key, Value: "gpu", Effect: corev1.TaintEffectNoExecute},
	} {
		if equalNodes(node(got), node(want)) {
			t.Errorf("taints differing only in %s compare equal: %+v vs %+v", name, got, want)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
