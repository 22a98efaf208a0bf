package nodeipam

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

func TestWriteSurelyFailed(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"node gone", apierrors.NewNotFound(gr, "n1"), true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n1", nil), true},
		{"forbidden", apierrors.NewForbidden(gr, "n1", errors.New("no")), true},
		{"bad request", apierrors.NewBadRequest("bad patch"), true},
		{"timeout: may have landed", apierrors.NewTimeoutError("slow", 1), false},
		{"server timeout", apierrors.NewServerTimeout(gr, "patch", 1), false},
		{"conflict", apierrors.NewConflict(gr, "n1", errors.New("changed")), false},
		{"unavailable", apierrors.NewServiceUnavailable("down"), false},
		{"connection reset", errors.New("read: connection reset by peer"), false},
		{"context deadline", context.DeadlineExceeded, false},
	} {
		if got := WriteSurelyFailed(tc.err); got != tc.want {
			t.Errorf("%s: WriteSurelyFailed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
