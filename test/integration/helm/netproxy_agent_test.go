package helm

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestProxyAgentProbeAsDeploy: the chart's agent binds health to loopback
// and probes it, rolls out and drains exactly as deploy/network-proxy's
// (whose own test runs that probe against an agent).
func TestProxyAgentProbeAsDeploy(t *testing.T) {
	objs := objects(t, mustRender(t, map[string]any{"networkProxy": map[string]any{"enabled": true,
		"agent": map[string]any{"proxyServerHost": "cp.example.com"}}}))
	got, want := &appsv1.DaemonSet{}, &appsv1.DaemonSet{}
	mustGet(t, objs, "DaemonSet", "portside-proxy-agent", got)
	mustGet(t, deployObjects(t, "deploy/network-proxy/proxy-agent.yaml"), "DaemonSet", "portside-proxy-agent", want)
	gc, wc := &got.Spec.Template.Spec.Containers[0], &want.Spec.Template.Spec.Containers[0]
	if !hasArg(gc, "--health-server-host=127.0.0.1") {
		t.Errorf("the chart's agent does not bind health to loopback: %q", gc.Command)
	}
	if !reflect.DeepEqual(gc.LivenessProbe, wc.LivenessProbe) || !reflect.DeepEqual(gc.ReadinessProbe, wc.ReadinessProbe) || gc.ReadinessProbe == nil {
		t.Errorf("the chart's agent probes %+v (readiness %+v), want deploy/network-proxy's %+v (readiness %+v)", gc.LivenessProbe, gc.ReadinessProbe, wc.LivenessProbe, wc.ReadinessProbe)
	}
	if !reflect.DeepEqual(got.Spec.UpdateStrategy, want.Spec.UpdateStrategy) ||
		!reflect.DeepEqual(got.Spec.Template.Spec.TerminationGracePeriodSeconds, want.Spec.Template.Spec.TerminationGracePeriodSeconds) {
		t.Errorf("the chart's agent rolls out %+v with grace %v, want %+v with %v", got.Spec.UpdateStrategy,
			got.Spec.Template.Spec.TerminationGracePeriodSeconds, want.Spec.UpdateStrategy, want.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
}
