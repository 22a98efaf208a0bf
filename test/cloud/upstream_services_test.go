package cloud

import (
	"net"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	cloudprovider "k8s.io/cloud-provider"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/cloud-provider/fake"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/cloud/upstream"
)

const clusterName = "kubernetes"

// everythingService is what a provider with an SDK feature list might
// refuse, and what upstream's service controller hands any provider anyway:
// mixed TCP/UDP/SCTP, dual-stack, source ranges, externalTrafficPolicy
// Local, client-IP affinity, a provider annotation.
func everythingService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns", UID: "0b5b7c1e-0000-4000-8000-00000000d115",
			Labels: map[string]string{"app": "dns"}, Annotations: map[string]string{"service.beta.kubernetes.io/example-lb-sku": "premium"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, NodePort: 30053},
				{Name: "dns-udp", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
				{Name: "diameter", Protocol: corev1.ProtocolSCTP, Port: 3868, NodePort: 31868}},
			ClusterIP: "10.96.0.53", ClusterIPs: []string{"10.96.0.53", "fd00:96::53"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32053,
			LoadBalancerSourceRanges:      []string{"203.0.113.0/24", "2001:db8::/32"},
			SessionAffinity:               corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:         &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}},
			AllocateLoadBalancerNodePorts: ptr.To(true)},
	}
}

// readyNode is an initialized, Ready Node with a providerID.
func readyNode(name, providerID string) *corev1.Node {
	n := clusterNode(name, providerID, true)
	n.Spec.Taints = nil
	return n
}

// hosts is what Portside's service controller passes for nodes
// (internal/controllers/service Hosts: cloud.Host(cloud.NodeFrom(n)), by name).
func hosts(nodes []*corev1.Node) []cloud.Host {
	out := make([]cloud.Host, len(nodes))
	for i, n := range sortedNodes(nodes) {
		out[i] = cloud.Host(cloud.NodeFrom(n))
	}
	return out
}

// lbCalls keeps a provider's load-balancer calls, hosts sorted by name
// (upstream passes the lister's order, Portside sorts).
func lbCalls(calls []call, method string) []call {
	var out []call
	for _, c := range calls {
		if c.Method == method {
			c.Nodes = sortedNodes(c.Nodes)
			out = append(out, c)
		}
	}
	return out
}

// fakeLB is k8s.io/cloud-provider/fake with its load-balancer calls
// recorded through its callbacks (its own logs have no cluster name, and
// are guarded by locks a test cannot take).
func fakeLB() (cloudprovider.Interface, func() []call) {
	f := &fake.Cloud{ExternalIP: net.ParseIP("192.0.2.80")}
	r := &recorder{}
	f.EnsureCallCb = func(c fake.UpdateBalancerCall) {
		r.record(call{Method: "EnsureLoadBalancer", Service: c.Service, Nodes: slices.Clone(c.Hosts)})
	}
	f.UpdateCallCb = func(c fake.UpdateBalancerCall) {
		r.record(call{Method: "UpdateLoadBalancer", Service: c.Service, Nodes: slices.Clone(c.Hosts)})
	}
	return f, r.Calls
}

// TestUpstreamParityLoadBalancer provisions the same Service by upstream's
// service controller (syncLoadBalancerIfNeeded → ensureLoadBalancer; new
// Nodes → nodeSyncService → lockedUpdateLoadBalancerHosts) and through the
// adapter as Portside's service controller calls it (SpecFromService, then
// EnsureLoadBalancer / UpdateLoadBalancerHosts with its hosts). The
// provider must get the same cluster name, the same Service and the same
// full Node objects; and the adapter's features must let the Service
// through, since upstream never filters it.
//
// The Service comes first and the Nodes after it: upstream's service
// controller writes its service cache without a lock (controller.go:339)
// while its node worker reads it, a data race `make test` (-race) would
// report if a node sync ran during the first service sync.
func TestUpstreamParityLoadBalancer(t *testing.T) {
	for _, tc := range []providerCase{{"fake", fakeLB}, {"InstancesV2 provider", v2Provider}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, everythingService())
			svc, err := c.factory.Core().V1().Services().Lister().Services("default").Get("dns")
			if err != nil {
				t.Fatal(err)
			}

			viaAdapter, adapterCalls := tc.cloud()
			lbs, ok := upstream.FromUpstream(viaAdapter, upstream.WithNodes(c.factory.Core().V1().Nodes().Lister())).LoadBalancers()
			if !ok {
				t.Fatal("no load balancers")
			}
			spec, err := cloud.SpecFromService(clusterName, svc)
			if err != nil {
				t.Fatal(err)
			}
			checkFeaturesAdmit(t, lbs.Features(), spec)
			if _, err := lbs.EnsureLoadBalancer(c.ctx, spec, hosts(c.nodes(t))); err != nil {
				t.Fatal(err)
			}

			viaUpstream, upstreamCalls := tc.cloud()
			sc, err := servicecontroller.New(viaUpstream, c.client, c.factory.Core().V1().Services(), c.factory.Core().V1().Nodes(), clusterName, featuregate.NewFeatureGate())
			if err != nil {
				t.Fatal(err)
			}
			go sc.Run(c.ctx, 1, c.metrics)
			eventually(t, "upstream to ensure the load balancer", func() bool { return len(lbCalls(upstreamCalls(), "EnsureLoadBalancer")) > 0 })
			sameLBCalls(t, lbCalls(upstreamCalls(), "EnsureLoadBalancer")[:1], lbCalls(adapterCalls(), "EnsureLoadBalancer"))

			// Nodes join: upstream updates the hosts; so does Portside.
			for _, n := range []*corev1.Node{readyNode("node-a", "v2://i-a"), readyNode("node-b", "v2://i-b"), readyNode("node-c", "v2://i-c")} {
				if _, err := c.client.CoreV1().Nodes().Create(c.ctx, n, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var upUpdate []call
			eventually(t, "upstream to update the hosts to all three Nodes", func() bool {
				for _, u := range lbCalls(upstreamCalls(), "UpdateLoadBalancer") {
					if len(u.Nodes) == 3 {
						upUpdate = []call{u}
						return true
					}
				}
				return false
			})
			eventually(t, "the lister to see all three Nodes", func() bool { return len(c.nodes(t)) == 3 })
			if err := lbs.UpdateLoadBalancerHosts(c.ctx, spec, hosts(c.nodes(t))); err != nil {
				t.Fatal(err)
			}
			sameLBCalls(t, upUpdate, lbCalls(adapterCalls(), "UpdateLoadBalancer"))
		})
	}
}

func sameLBCalls(t *testing.T, upstreamCalls, adapterCalls []call) {
	t.Helper()
	if len(upstreamCalls) != 1 || len(adapterCalls) != 1 || !apiequality.Semantic.DeepEqual(upstreamCalls, adapterCalls) {
		t.Fatalf("the provider was asked differently (-upstream +adapter):\n%s", diff.Diff(upstreamCalls, adapterCalls))
	}
}

// checkFeaturesAdmit checks what Portside's service controller checks before
// calling a provider (internal/controllers/service Unsupported): every
// feature this Service needs is declared.
func checkFeaturesAdmit(t *testing.T, f cloud.LoadBalancerFeatures, spec *cloud.LoadBalancerSpec) {
	t.Helper()
	protos := map[corev1.Protocol]bool{}
	for _, p := range spec.Ports {
		protos[p.Protocol] = true
		if !f.SupportsProtocol(p.Protocol) {
			t.Errorf("protocol %s refused", p.Protocol)
		}
	}
	if len(protos) > 1 && !f.MixedProtocols || len(spec.IPFamilies) > 1 && !f.DualStack ||
		len(spec.SourceRanges) > 0 && !f.SourceRanges || spec.HealthCheck != nil && !f.HealthChecks {
		t.Errorf("features %+v refuse a Service upstream hands the provider", f)
	}
}
