package cloud

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/internal/controllers/service"
	"github.com/portside-io/portside/pkg/cloud"
)

// TestLocalProviderKeepsOwnershipTags: what orphan collection's safety rests
// on, end to end through the local cloud: the tags EnsureLoadBalancer
// writes come back from ListLoadBalancers, and prove the load balancer ours
// only to the controller of the same cluster UID and class.
func TestLocalProviderKeepsOwnershipTags(t *testing.T) {
	_, p := newProvider(t)
	ctx := context.Background()
	lbs, _ := p.LoadBalancers()
	lister := lbs.(cloud.LoadBalancerLister)
	for i, class := range []string{"", "example.com/portside"} {
		svc := lbService(30080)
		svc.UID = types.UID(fmt.Sprintf("0000000%d-1111-2222-3333-444444444444", i))
		if class != "" {
			c := class
			svc.Spec.LoadBalancerClass = &c
		}
		spec, err := cloud.SpecFromService("c1", svc)
		if err != nil {
			t.Fatal(err)
		}
		spec.ClusterUID = "cluster-1"
		if _, err := lbs.EnsureLoadBalancer(ctx, spec, nil); err != nil {
			t.Fatal(err)
		}
		refs, err := lister.ListLoadBalancers(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		var ref *cloud.LoadBalancerRef
		for i := range refs {
			if refs[i].Name == spec.Name {
				ref = &refs[i]
			}
		}
		if ref == nil || ref.UID != svc.UID || ref.Class != class || ref.ClusterUID != "cluster-1" || ref.Service.Name != svc.Name {
			t.Fatalf("class %q: listed %+v, want the spec's tags", class, ref)
		}
		cases := []struct {
			clusterUID, class string
			want              bool
		}{
			{"cluster-1", class, true},
			{"cluster-2", class, false},
			{"cluster-1", class + "-other", false},
			{"", class, false},
		}
		for _, tc := range cases {
			if got := service.ProvablyOurs(*ref, tc.clusterUID, tc.class); got != tc.want {
				t.Errorf("made with class %q: ProvablyOurs(cluster %q, class %q) = %v, want %v", class, tc.clusterUID, tc.class, got, tc.want)
			}
		}
	}
}
