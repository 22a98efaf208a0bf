package conformance

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

func TestParseCapabilities(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Capability
		err  string
	}{
		{"", nil, ""},
		{"instances", []Capability{Instances}, ""},
		{" instances , routes,", []Capability{Instances, Routes}, ""},
		{"all", AllCapabilities, ""},
		{"instances,bogus,lb", nil, `unknown capabilities "bogus", "lb": valid are instances, instance-deletion`},
	} {
		got, err := ParseCapabilities(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		want := map[Capability]bool{}
		for _, w := range c.want {
			want[w] = true
		}
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%q: got %v %v, want %v", c.in, got, err, want)
		}
	}
}

func TestCapabilitiesFromProvider(t *testing.T) {
	got := CapabilitiesFromProvider(cloud.Capabilities{
		Instances: true, LoadBalancers: true, Routes: true, RegistryCredentials: true,
		LoadBalancerFeature: cloud.LoadBalancerFeatures{Protocols: []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}, SourceRanges: true, HealthChecks: true},
	})
	want := map[Capability]bool{Instances: true, LoadBalancers: true, LBUDP: true, LBSourceRanges: true, LBHealthChecks: true, Routes: true, RegistryCreds: true}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := CapabilitiesFromProvider(cloud.Capabilities{LoadBalancerFeature: cloud.LoadBalancerFeatures{DualStack: true}}); len(got) != 0 {
		t.Errorf("features without load balancers: %v", got)
	}
}

func TestTestsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range Tests() {
		if tc.Name == "" || seen[tc.Name] || tc.Run == nil || tc.Timeout <= 0 {
			t.Errorf("test %q: duplicate, unnamed, without Run or Timeout", tc.Name)
		}
		seen[tc.Name] = true
		for _, c := range tc.Needs {
			if _, err := ParseCapabilities(string(c)); err != nil {
				t.Errorf("test %s needs unknown capability %s", tc.Name, c)
			}
		}
	}
}
