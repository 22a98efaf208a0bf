package conformance

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeProblems(t *testing.T) {
	good := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{
				corev1.LabelTopologyZone: "z1", corev1.LabelFailureDomainBetaZone: "z1",
				corev1.LabelTopologyRegion: "r", corev1.LabelFailureDomainBetaRegion: "r",
				corev1.LabelInstanceTypeStable: "small", LabelBetaInstanceType: "small",
			}},
			Spec:   corev1.NodeSpec{ProviderID: "local://i-1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}},
		}
	}
	if ps := nodeProblems(good(), "local"); len(ps) != 0 {
		t.Errorf("a good node has problems: %v", ps)
	}
	bad := good()
	bad.Spec.ProviderID = "aws://x"
	bad.Labels[corev1.LabelFailureDomainBetaZone] = "z2"
	delete(bad.Labels, LabelBetaInstanceType)
	bad.Status.Addresses = nil
	bad.Spec.Taints = []corev1.Taint{{Key: TaintUninitialized, Effect: corev1.TaintEffectNoSchedule}}
	ps := strings.Join(nodeProblems(bad, "local"), "\n")
	for _, want := range []string{
		`spec.providerID "aws://x" does not start with "local://"`,
		`labels topology.kubernetes.io/zone="z1" and failure-domain.beta.kubernetes.io/zone="z2" differ`,
		`beta.kubernetes.io/instance-type=(unset)`,
		"no InternalIP address",
		"still has the node.cloudprovider.kubernetes.io/uninitialized taint",
	} {
		if !strings.Contains(ps, want) {
			t.Errorf("problems lack %q:\n%s", want, ps)
		}
	}
}

func TestPVProblems(t *testing.T) {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{corev1.LabelTopologyZone: "a__b", corev1.LabelTopologyRegion: "r"}},
		Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"b", "a"}},
				{Key: corev1.LabelTopologyRegion, Operator: corev1.NodeSelectorOpIn, Values: []string{"r"}},
			},
		}}}}},
	}
	if ps := pvProblems(pv, "a__b", "r", []string{"a", "b"}); len(ps) != 0 {
		t.Errorf("good PV: %v", ps)
	}
	pv.Labels = nil
	pv.Spec.NodeAffinity = nil
	if ps := pvProblems(pv, "a__b", "r", []string{"a", "b"}); len(ps) != 3 {
		t.Errorf("bare PV: %v", ps)
	}
}
