package nodesim

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecidePod(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name string
		pod  corev1.Pod
		mine bool
		want PodAction
	}{
		{"another kubelet's", corev1.Pod{}, false, PodLeave},
		{"bound, not started", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, true, PodStart},
		{"running with an IP", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.2"}}, true, PodLeave},
		{"running without an IP", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, true, PodStart},
		{"finished", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, true, PodLeave},
		{"being deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.2"}}, true, PodFinishDeletion},
		{"another's, being deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false, PodLeave},
	}
	for _, tc := range cases {
		if got := DecidePod(&tc.pod, tc.mine); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPodIP(t *testing.T) {
	cidr := netip.MustParsePrefix("10.244.3.0/30")
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	if got, err := PodIP(cidr, nil); err != nil || got != a("10.244.3.2") {
		t.Errorf("first = %v %v, want 10.244.3.2 (.0 and .1 are not for pods)", got, err)
	}
	if got, err := PodIP(cidr, map[netip.Addr]bool{a("10.244.3.2"): true}); err != nil || got != a("10.244.3.3") {
		t.Errorf("next = %v %v", got, err)
	}
	if _, err := PodIP(cidr, map[netip.Addr]bool{a("10.244.3.2"): true, a("10.244.3.3"): true}); err == nil {
		t.Error("a full CIDR gave an address")
	}
}
