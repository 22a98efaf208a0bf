package devenv

import (
	"net/netip"
	"testing"
)

func TestAPIServerEndpoints(t *testing.T) {
	eps := apiServerEndpoints(netip.MustParseAddr("198.18.8.1"))
	if eps.Namespace != "default" || eps.Name != "kubernetes" || len(eps.Subsets) != 1 {
		t.Fatalf("endpoints = %+v", eps)
	}
	s := eps.Subsets[0]
	// The port's name must be the Service's ("https"): kube-proxy matches
	// a selectorless Service's ports to its endpoints by name.
	if len(s.Addresses) != 1 || s.Addresses[0].IP != "198.18.8.1" || len(s.Ports) != 1 ||
		s.Ports[0].Name != "https" || s.Ports[0].Port != apiServerGatewayPort || s.Ports[0].Protocol != "TCP" {
		t.Errorf("subset = %+v, want 198.18.8.1 port https %d/TCP", s, apiServerGatewayPort)
	}
}

func TestKubernetesServiceIP(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"10.96.0.0/16", "10.96.0.1"},
		{"10.98.0.0/16", "10.98.0.1"},
	} {
		env := &environment{realNodes: true, realNet: realNetwork{Services: netip.MustParsePrefix(tc.cidr)}}
		if got := env.kubernetesServiceIP(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.cidr, got, tc.want)
		}
	}
}
