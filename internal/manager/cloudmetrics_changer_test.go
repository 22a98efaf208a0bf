package manager

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/pkg/cloud"
)

// changerCloud's load balancers change hosts incrementally, and list when
// lister is set.
type changerCloud struct {
	metricsCloud
}

type mcChangingLBs struct{ mcLBs }

func (mcChangingLBs) ChangeLoadBalancerHosts(context.Context, *cloud.LoadBalancerSpec, []cloud.Host, []cloud.Host) error {
	return errCloud
}

type mcListingChangingLBs struct{ mcListingLBs }

func (mcListingChangingLBs) ChangeLoadBalancerHosts(context.Context, *cloud.LoadBalancerSpec, []cloud.Host, []cloud.Host) error {
	return errCloud
}

func (c *changerCloud) LoadBalancers() (cloud.LoadBalancers, bool) {
	if c.lister {
		return mcListingChangingLBs{mcListingLBs{mcLBs{c.err}}}, true
	}
	return mcChangingLBs{mcLBs{c.err}}, true
}

// TestInstrumentKeepsOptionalInterfaces: the metrics wrapper keeps each
// optional interface the provider's load balancers have, and only those
// (the service controller asserts them).
func TestInstrumentKeepsOptionalInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		p                      cloud.Provider
		wantLister, wantChange bool
	}{
		{"plain", &metricsCloud{name: "a", err: errCloud}, false, false},
		{"lister", &metricsCloud{name: "b", err: errCloud, lister: true}, true, false},
		{"changer", &changerCloud{metricsCloud{name: "c", err: errCloud}}, false, true},
		{"both", &changerCloud{metricsCloud{name: "d", err: errCloud, lister: true}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			lbs, _ := instrumentProvider(tc.p, reg).LoadBalancers()
			_, isLister := lbs.(cloud.LoadBalancerLister)
			changer, isChanger := lbs.(cloud.LoadBalancerHostChanger)
			if isLister != tc.wantLister || isChanger != tc.wantChange {
				t.Fatalf("lister %v changer %v; want %v %v", isLister, isChanger, tc.wantLister, tc.wantChange)
			}
			if isChanger {
				err := changer.ChangeLoadBalancerHosts(context.Background(), &cloud.LoadBalancerSpec{}, nil, nil)
				if !errors.Is(err, errCloud) {
					t.Errorf("ChangeLoadBalancerHosts through the wrapper: %v", err)
				}
				if got := byRequest(t, reg, "cloudprovider_"+tc.p.ProviderName()+"_api_request_errors"); got["change_load_balancer_hosts"] != 1 {
					t.Errorf("errors by request: %v", got)
				}
			}
		})
	}
}
