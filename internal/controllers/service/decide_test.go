package service

import (
	"fmt"
	"hash/fnv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/pkg/cloud"
)

type svcOpt func(*corev1.Service)

func svc(opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "uid-1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withClass(c string) svcOpt { return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &c } }
func withType(t corev1.ServiceType) svcOpt {
	return func(s *corev1.Service) { s.Spec.Type = t }
}
func withFinalizer(s *corev1.Service) { s.Finalizers = append(s.Finalizers, FinalizerCleanup) }
func deleting(s *corev1.Service) {
	now := metav1.Now()
	s.DeletionTimestamp = &now
}

// TestNeedsCleanup compares with upstream's needsCleanup (cloud-provider
// v0.37.2 controllers/service), case by case, where Portside deliberately
// differs: upstream would clean up another class's Service on deletion.
func TestNeedsCleanup(t *testing.T) {
	cases := []struct {
		name  string
		svc   *corev1.Service
		class string
		owner Ownership
		want  bool
	}{
		// Default mode (no --load-balancer-class): class-less Services are ours.
		{"no finalizer", svc(deleting), "", OwnershipUnknown, false},
		{"live LB Service", svc(withFinalizer), "", OwnershipUnknown, false},
		{"deleted LB Service", svc(withFinalizer, deleting), "", OwnershipUnknown, true},
		{"type changed to ClusterIP (upstream)", svc(withFinalizer, withType(corev1.ServiceTypeClusterIP)), "", OwnershipUnknown, true},
		{"type changed, known ours", svc(withFinalizer, withType(corev1.ServiceTypeNodePort)), "", OwnershipOurs, true},
		{"type changed from another class", svc(withFinalizer, withType(corev1.ServiceTypeClusterIP)), "", OwnershipOthers, false},
		// upstream: true; Portside never touches another class's Service.
		{"another class, deleted", svc(withClass("x"), withFinalizer, deleting), "", OwnershipUnknown, false},
		{"another class, deleted, even if we once made it", svc(withClass("x"), withFinalizer, deleting), "", OwnershipOurs, false},
		{"another class, live", svc(withClass("x"), withFinalizer), "", OwnershipUnknown, false},
		// Class mode (--load-balancer-class=ours).
		{"class mode: class-less deleted", svc(withFinalizer, deleting), "ours", OwnershipUnknown, false},
		{"class mode: other class deleted", svc(withClass("x"), withFinalizer, deleting), "ours", OwnershipUnknown, false},
		{"class mode: ours deleted", svc(withClass("ours"), withFinalizer, deleting), "ours", OwnershipUnknown, true},
		{"class mode: ours live", svc(withClass("ours"), withFinalizer), "ours", OwnershipUnknown, false},
		{"class mode: type changed, unknown", svc(withFinalizer, withType(corev1.ServiceTypeClusterIP)), "ours", OwnershipUnknown, false},
		{"class mode: type changed, known ours", svc(withFinalizer, withType(corev1.ServiceTypeClusterIP)), "ours", OwnershipOurs, true},
		{"class mode: type changed and deleted, known ours", svc(withFinalizer, deleting, withType(corev1.ServiceTypeClusterIP)), "ours", OwnershipOurs, true},
	}
	for _, tc := range cases {
		if got := NeedsCleanup(tc.svc, tc.class, tc.owner); got != tc.want {
			t.Errorf("%s: NeedsCleanup = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWantsLoadBalancer(t *testing.T) {
	cases := []struct {
		name  string
		svc   *corev1.Service
		class string
		want  bool
	}{
		{"class-less LB", svc(), "", true},
		{"ClusterIP", svc(withType(corev1.ServiceTypeClusterIP)), "", false},
		{"being deleted", svc(deleting), "", false},
		{"another class", svc(withClass("x")), "", false},
		{"class mode: class-less", svc(), "ours", false},
		{"class mode: ours", svc(withClass("ours")), "ours", true},
		{"class mode: another", svc(withClass("x")), "ours", false},
	}
	for _, tc := range cases {
		if got := WantsLoadBalancer(tc.svc, tc.class); got != tc.want {
			t.Errorf("%s: WantsLoadBalancer = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// node is a Node with an InternalIP of its own (from its name): nodes that
// shared one would send host changes down the whole-set path
// (SharedAddress) and leave the incremental one untested.
func node(name string, mut func(*corev1.Node)) *corev1.Node {
	sum := fnv.New32a()
	_, _ = sum.Write([]byte(name))
	h := sum.Sum32()
	ip := fmt.Sprintf("10.%d.%d.%d", h>>16&0xff, h>>8&0xff, h&0xff|1)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: corev1.NodeSpec{ProviderID: "local://" + name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}}}
	if mut != nil {
		mut(n)
	}
	return n
}

// TestEligibleNode follows upstream's stableNodeSetPredicates, except the
// cluster autoscaler's taint: kube-proxy's health check drains such a node.
func TestEligibleNode(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name string
		mut  func(*corev1.Node)
		want bool
	}{
		{"plain", nil, true},
		{"being deleted", func(n *corev1.Node) { n.DeletionTimestamp = &now }, false},
		{"excluded", func(n *corev1.Node) { n.Labels[LabelExcludeFromLB] = "true" }, false},
		{"exclusion false", func(n *corev1.Node) { n.Labels[LabelExcludeFromLB] = "false" }, true},
		{"exclusion unparsable", func(n *corev1.Node) { n.Labels[LabelExcludeFromLB] = "maybe" }, false},
		{"autoscaler taint", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: TaintToBeDeletedByCA, Effect: corev1.TaintEffectNoSchedule}}
		}, true},
		{"not ready", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, true},
	}
	for _, tc := range cases {
		if got := EligibleNode(node("n", tc.mut)); got != tc.want {
			t.Errorf("%s: EligibleNode = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHostSetChanged(t *testing.T) {
	base := node("n", nil)
	cases := []struct {
		name string
		mut  func(*corev1.Node)
		want bool
	}{
		{"nothing", nil, false},
		{"condition", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, false},
		{"autoscaler taint", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: TaintToBeDeletedByCA}} }, false},
		{"address order", func(n *corev1.Node) {
			a := n.Status.Addresses
			n.Status.Addresses = []corev1.NodeAddress{a[1], a[0]}
		}, false},
		{"address changed", func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.9" }, true},
		{"providerID", func(n *corev1.Node) { n.Spec.ProviderID = "local://other" }, true},
		{"excluded", func(n *corev1.Node) { n.Labels[LabelExcludeFromLB] = "" }, true},
	}
	for _, tc := range cases {
		if got := HostSetChanged(base, node("n", tc.mut)); got != tc.want {
			t.Errorf("%s: HostSetChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHostsHashIgnoresAddressOrder(t *testing.T) {
	a := Hosts([]*corev1.Node{node("n1", nil), node("n2", nil)})
	b := Hosts([]*corev1.Node{node("n2", nil), node("n1", func(n *corev1.Node) {
		n.Status.Addresses = []corev1.NodeAddress{n.Status.Addresses[1], n.Status.Addresses[0]}
	})})
	if HostsHash(a) != HostsHash(b) {
		t.Error("the same hosts in another order hash differently")
	}
	c := Hosts([]*corev1.Node{node("n1", func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }), node("n2", nil)})
	if HostsHash(a) == HostsHash(c) {
		t.Error("a changed address does not change the hash")
	}
}

// TestSpecHashCoversUpstreamResyncFields: every field upstream's needsUpdate
// re-syncs on changes the hash, so the provider is called again.
func TestSpecHashCoversUpstreamResyncFields(t *testing.T) {
	hash := func(s *corev1.Service) string {
		spec, err := cloud.SpecFromService("c", s)
		if err != nil {
			t.Fatal(err)
		}
		return SpecHash(spec)
	}
	base := hash(svc())
	muts := map[string]svcOpt{
		"targetPort":  func(s *corev1.Service) { s.Spec.Ports[0].TargetPort.IntVal = 8080 },
		"appProtocol": func(s *corev1.Service) { p := "http"; s.Spec.Ports[0].AppProtocol = &p },
		"sessionAffinityConfig": func(s *corev1.Service) {
			to := int32(60)
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &to}}
		},
		"externalIPs": func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} },
		"ipFamilyPolicy": func(s *corev1.Service) {
			p := corev1.IPFamilyPolicyPreferDualStack
			s.Spec.IPFamilyPolicy = &p
		},
		"annotation":            func(s *corev1.Service) { s.Annotations = map[string]string{"example.com/x": "1"} },
		"externalTrafficPolicy": func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		"loadBalancerIP":        func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.9" },
		"port name":             func(s *corev1.Service) { s.Spec.Ports[0].Name = "web" },
		"uid":                   func(s *corev1.Service) { s.UID = types.UID("uid-2") },
	}
	for name, mut := range muts {
		if hash(svc(mut)) == base {
			t.Errorf("changing %s does not change SpecHash", name)
		}
	}
	if hash(svc(func(s *corev1.Service) { s.Status.Conditions = []metav1.Condition{{Type: "X"}} })) != base {
		t.Error("a status change changes SpecHash")
	}
}

func TestStatusEqualAndUsable(t *testing.T) {
	a := &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}, {IP: "2001:db8::1"}}}
	b := &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "2001:db8::1"}, {IP: "192.0.2.1"}}}
	if !StatusEqual(a, b) {
		t.Error("ingress order is a change")
	}
	if StatusEqual(a, &corev1.LoadBalancerStatus{Ingress: a.Ingress[:1]}) {
		t.Error("a removed ingress is not a change")
	}
	if !StatusEqual(&corev1.LoadBalancerStatus{}, &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{}}) {
		t.Error("nil and empty ingress differ")
	}
	for _, tc := range []struct {
		st   *corev1.LoadBalancerStatus
		want bool
	}{{nil, false}, {&corev1.LoadBalancerStatus{}, false}, {a, true}} {
		if got := UsableStatus(tc.st) == ""; got != tc.want {
			t.Errorf("UsableStatus(%v) usable = %v, want %v", tc.st, got, tc.want)
		}
	}
}

func TestDecideOrphan(t *testing.T) {
	ref := cloud.LoadBalancerRef{Name: "auid1", Service: types.NamespacedName{Namespace: "ns", Name: "s"}, UID: "uid-1", ClusterUID: "cluster-1"}
	cases := []struct {
		name  string
		svc   *corev1.Service
		class string
		want  OrphanVerdict
	}{
		{"Service gone", nil, "", OrphanDelete},
		{"recreated with another UID", svc(func(s *corev1.Service) { s.UID = "uid-2" }), "", OrphanDelete},
		{"still wanted", svc(withFinalizer), "", OrphanKeep},
		{"being deleted: its cleanup is queued", svc(withFinalizer, deleting), "", OrphanCleanup},
		{"being deleted without finalizer: gone soon", svc(deleting), "", OrphanKeep},
		{"type changed, finalizer kept", svc(withFinalizer, withType(corev1.ServiceTypeClusterIP)), "", OrphanCleanup},
		{"type changed, no finalizer", svc(withType(corev1.ServiceTypeClusterIP)), "", OrphanDeleteOnly},
		{"now another class's, with its finalizer", svc(withClass("x"), withFinalizer), "", OrphanDeleteOnly},
		{"class mode: ours wanted", svc(withClass("ours"), withFinalizer), "ours", OrphanKeep},
		{"class mode: type changed", svc(withFinalizer, withType(corev1.ServiceTypeClusterIP)), "ours", OrphanCleanup},
	}
	for _, tc := range cases {
		if got := DecideOrphan(ref, tc.svc, tc.class); got != tc.want {
			t.Errorf("%s: DecideOrphan = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestProvablyOurs(t *testing.T) {
	full := cloud.LoadBalancerRef{Name: "a1", Service: types.NamespacedName{Namespace: "ns", Name: "s"}, UID: "uid-1", ClusterUID: "c1"}
	cases := []struct {
		name  string
		mut   func(*cloud.LoadBalancerRef)
		ours  string
		class string
		want  bool
	}{
		{"all tags match", nil, "c1", "", true},
		{"another cluster of the same name", func(r *cloud.LoadBalancerRef) { r.ClusterUID = "c2" }, "c1", "", false},
		{"no cluster UID tag (older or foreign)", func(r *cloud.LoadBalancerRef) { r.ClusterUID = "" }, "c1", "", false},
		{"our cluster UID unknown", nil, "", "", false},
		{"no Service UID tag", func(r *cloud.LoadBalancerRef) { r.UID = "" }, "c1", "", false},
		{"no Service name tag", func(r *cloud.LoadBalancerRef) { r.Service = types.NamespacedName{} }, "c1", "", false},
		// Either part alone: a Service looked up in namespace "" (or by
		// name "") is never found, and "not found" deletes.
		{"no Service namespace, name set", func(r *cloud.LoadBalancerRef) { r.Service.Namespace = "" }, "c1", "", false},
		{"no Service name, namespace set", func(r *cloud.LoadBalancerRef) { r.Service.Name = "" }, "c1", "", false},
		{"made by a class controller, we serve class-less", func(r *cloud.LoadBalancerRef) { r.Class = "x" }, "c1", "", false},
		{"made by the class-less controller, we serve a class", nil, "c1", "x", false},
		{"made by our class", func(r *cloud.LoadBalancerRef) { r.Class = "x" }, "c1", "x", true},
	}
	for _, tc := range cases {
		r := full
		if tc.mut != nil {
			tc.mut(&r)
		}
		if got := ProvablyOurs(r, tc.ours, tc.class); got != tc.want {
			t.Errorf("%s: ProvablyOurs = %v, want %v", tc.name, got, tc.want)
		}
	}
}
