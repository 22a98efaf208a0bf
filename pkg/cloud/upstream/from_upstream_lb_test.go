package upstream

import (
	"context"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cloud-provider/fake"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/cloud"
)

// Upstream's service controller hands the provider every LoadBalancer
// Service without a class (Controller.syncLoadBalancerIfNeeded,
// wantsLoadBalancer): the adapter must declare features that let Portside's
// service controller do the same, whatever the protocols or families.
func TestFromUpstreamFeaturesLetEverythingThrough(t *testing.T) {
	lbs, _ := FromUpstream(&fake.Cloud{}).LoadBalancers()
	f := lbs.Features()
	for _, p := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
		if !f.SupportsProtocol(p) {
			t.Errorf("protocol %s not declared", p)
		}
	}
	if !f.MixedProtocols || !f.DualStack || !f.SourceRanges || !f.HealthChecks {
		t.Errorf("features = %+v, want everything", f)
	}
	only := cloud.LoadBalancerFeatures{Protocols: []corev1.Protocol{corev1.ProtocolTCP}}
	if lbs, _ := FromUpstream(&fake.Cloud{}, WithLoadBalancerFeatures(only)).LoadBalancers(); lbs.Features().SupportsProtocol(corev1.ProtocolUDP) {
		t.Error("WithLoadBalancerFeatures ignored")
	}
}

// A mixed-protocol, dual-stack, SCTP Service reaches the provider as the
// very object, with the hosts' full Node objects (the lister's, not copies,
// as Controller.ensureLoadBalancer passes them).
func TestFromUpstreamLoadBalancerGetsFullObjects(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mixed", UID: "u-2", Annotations: map[string]string{"example.com/lb-sku": "premium"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{
				{Name: "dns-tcp", Port: 53, NodePort: 30053, Protocol: corev1.ProtocolTCP},
				{Name: "dns-udp", Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP},
				{Name: "sig", Port: 3868, NodePort: 31868, Protocol: corev1.ProtocolSCTP}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32000,
			LoadBalancerSourceRanges: []string{"203.0.113.0/24"}},
	}
	nodes := nodeMap{"node-a": fullNode("node-a", "fake://i-a"), "node-b": fullNode("node-b", "fake://i-b")}
	f := &fake.Cloud{ExternalIP: net.ParseIP("192.0.2.10")}
	lbs, _ := FromUpstream(f, WithNodes(nodes)).LoadBalancers()
	spec, err := cloud.SpecFromService("c1", svc)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []cloud.Host{cloud.Host(cloud.NodeFrom(nodes["node-a"])), cloud.Host(cloud.NodeFrom(nodes["node-b"]))}
	if _, err := lbs.EnsureLoadBalancer(context.Background(), spec, hosts); err != nil {
		t.Fatal(err)
	}
	if err := lbs.UpdateLoadBalancerHosts(context.Background(), spec, hosts[1:]); err != nil {
		t.Fatal(err)
	}
	ensure, update := f.EnsureCalls[0], f.UpdateCalls[0]
	if ensure.Service != svc || update.Service != svc {
		t.Fatal("the provider must get the Service object itself")
	}
	if len(ensure.Hosts) != 2 || ensure.Hosts[0] != nodes["node-a"] || ensure.Hosts[1] != nodes["node-b"] ||
		len(update.Hosts) != 1 || update.Hosts[0] != nodes["node-b"] {
		t.Fatalf("hosts = %v / %v, want the lister's Nodes", ensure.Hosts, update.Hosts)
	}
	// A spec built by hand (no Object) still gives the provider a Service.
	bare := *spec
	bare.Object = nil
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), &bare); err != nil {
		t.Fatal(err)
	}
	rebuilt := service(&bare)
	if rebuilt.Name != "mixed" || rebuilt.UID != "u-2" || len(rebuilt.Spec.Ports) != 3 || rebuilt.Spec.HealthCheckNodePort != 32000 ||
		!apiequality.Semantic.DeepEqual(rebuilt.Spec.IPFamilies, svc.Spec.IPFamilies) || rebuilt.Spec.LoadBalancerSourceRanges[0] != "203.0.113.0/24" {
		t.Fatalf("rebuilt service = %+v", rebuilt.Spec)
	}
}
