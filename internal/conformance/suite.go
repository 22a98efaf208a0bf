package conformance

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// Tests returns every test of the suite, in the order they run.
func Tests() []Test {
	tests := []Test{
		nodesInitializedTest(),
		providedNodeIPTest(),
		nodeLifecycleTest(),
		routesTest(),
		pvLabelsTest(),
		credentialsTest(),
		networkProxyTest(),
	}
	tests = append(tests, LoadBalancerTests()...)
	return append(tests, dualStackTests()...)
}

// CapabilitiesFromProvider maps what cloud.Discover found in a Portside
// provider to capability names. What a provider cannot tell (lb-ip-mode,
// lb-reachable, instance-deletion, network-proxy) is left out: those
// depend on how the run reaches the cluster and the cloud.
func CapabilitiesFromProvider(c cloud.Capabilities) map[Capability]bool {
	caps := map[Capability]bool{}
	set := func(c Capability, ok bool) {
		if ok {
			caps[c] = true
		}
	}
	set(Instances, c.Instances)
	set(Routes, c.Routes)
	set(Volumes, c.Volumes)
	set(RegistryCreds, c.RegistryCredentials)
	if c.LoadBalancers {
		f := c.LoadBalancerFeature
		caps[LoadBalancers] = true
		set(LBUDP, f.SupportsProtocol(corev1.ProtocolUDP))
		set(LBMixedProtocols, f.MixedProtocols)
		set(LBSourceRanges, f.SourceRanges)
		set(LBHealthChecks, f.HealthChecks)
		set(LBDualStack, f.DualStack)
	}
	return caps
}

// ParseCapabilities parses --capabilities: capability names separated by
// commas, or "all".
func ParseCapabilities(s string) (map[Capability]bool, error) {
	caps := map[Capability]bool{}
	var unknown []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "all":
			for _, c := range AllCapabilities {
				caps[c] = true
			}
		case slices.Contains(AllCapabilities, Capability(name)):
			caps[Capability(name)] = true
		default:
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		valid := make([]string, len(AllCapabilities))
		for i, c := range AllCapabilities {
			valid[i] = string(c)
		}
		return nil, fmt.Errorf("unknown capabilities %s: valid are %s, or all", strings.Join(unknown, ", "), strings.Join(valid, ", "))
	}
	return caps, nil
}
