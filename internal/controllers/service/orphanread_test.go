package service

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/portside-io/portside/pkg/cloud"
)

// TestCollectOneInDoubtKeeps: the orphan collector deletes a load balancer
// of ours only when its Service is provably gone (NotFound, or another
// UID). When reading the Service fails (Forbidden from missing RBAC, a
// timeout, the apiserver unavailable), it keeps the load balancer and
// reports the error, so the pass is retried.
func TestCollectOneInDoubtKeeps(t *testing.T) {
	ref := cloud.LoadBalancerRef{Name: "a1", Service: types.NamespacedName{Namespace: "ns", Name: "s"}, UID: "uid-1", ClusterUID: "cluster-uid"}
	gr := schema.GroupResource{Resource: "services"}
	for _, tc := range []struct {
		name       string
		getErr     error
		wantDelete bool
		wantErr    bool
	}{
		{"forbidden", apierrors.NewForbidden(gr, "s", errors.New("no RBAC")), false, true},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false, true},
		{"unavailable", apierrors.NewServiceUnavailable("down"), false, true},
		{"not found", apierrors.NewNotFound(gr, "s"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb := &fakeLB{}
			h := newHarness(t, lb, nil)
			h.client.PrependReactor("get", "services", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.getErr
			})
			err := h.c.collectOne(context.Background(), ref)
			if (err != nil) != tc.wantErr {
				t.Errorf("collectOne error %v, want error %v", err, tc.wantErr)
			}
			deleted := false
			for _, call := range lb.snapshot() {
				deleted = deleted || call.op == "delete"
			}
			if deleted != tc.wantDelete {
				t.Errorf("load balancer deleted: %v, want %v (calls %+v)", deleted, tc.wantDelete, lb.snapshot())
			}
		})
	}
}
