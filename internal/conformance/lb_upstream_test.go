package conformance

import (
	"net/netip"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLBUBackendKey(t *testing.T) {
	pods := []string{"lb-affinity-5c8d-aaaaa", "lb-affinity-5c8d-bbbbb"}
	for _, tc := range []struct {
		name string
		a    httpAnswer
		want string // "" for none
	}{
		{"agnhost names the pod", httpAnswer{Status: 200, Body: "lb-affinity-5c8d-bbbbb"}, "pod lb-affinity-5c8d-bbbbb"},
		{"the stand-in: its node", httpAnswer{Status: 200, Node: "node-2", Pod: "ns/lb-affinity-5c8d-aaaaa",
			Body: "hello from ns/lb-affinity-5c8d-aaaaa (10.244.1.5 on node-2) through node-2; service ns/lb-affinity, client 127.0.0.1:4000"}, "node node-2"},
		{"not a pod of the Service", httpAnswer{Status: 200, Body: "other-pod"}, ""},
		{"an error status", httpAnswer{Status: 503, Node: "node-1", Pod: "x", Body: "no endpoints"}, ""},
	} {
		got, ok := lbuBackendKey(tc.a, pods)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: lbuBackendKey = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

func TestLBUAffinityVerdict(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keys     []string
		affinity bool
		want     bool
	}{
		{"affinity: one backend", []string{"pod a", "pod a", "pod a"}, true, true},
		{"affinity: two backends", []string{"pod a", "pod a", "pod b"}, true, false},
		{"no affinity: spread", []string{"node n1", "node n2", "node n1"}, false, true},
		{"no affinity: one backend", []string{"pod a", "pod a"}, false, false},
		{"no answers pass neither", nil, true, false},
		{"no answers pass neither (off)", nil, false, false},
	} {
		if got, detail := lbuAffinityVerdict(tc.keys, tc.affinity); got != tc.want {
			t.Errorf("%s: verdict %v (%s), want %v", tc.name, got, detail, tc.want)
		}
	}
}

func TestLBURolloutDone(t *testing.T) {
	dep := func(gen, observed int64, replicas, updated, available, current int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: current, UpdatedReplicas: updated, AvailableReplicas: available}}
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		want bool
	}{
		{"done", dep(2, 2, 3, 3, 3, 3), true},
		{"the new spec not seen yet (old status looks done)", dep(3, 2, 3, 3, 3, 3), false},
		{"surging: an old pod left", dep(2, 2, 3, 3, 3, 4), false},
		{"a new pod not available yet", dep(2, 2, 3, 3, 2, 3), false},
		{"old pods not replaced", dep(2, 2, 3, 1, 3, 3), false},
	} {
		if got, detail := lbuRolloutDone(tc.d); got != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, detail, tc.want)
		}
	}
}

func TestLBUEndpointNodes(t *testing.T) {
	ep := func(node string, ready *bool) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
		if node != "" {
			e.NodeName = ptr.To(node)
		}
		return e
	}
	items := []discoveryv1.EndpointSlice{
		{Endpoints: []discoveryv1.Endpoint{ep("node-3", ptr.To(true)), ep("node-1", nil), ep("node-2", ptr.To(false))}},
		{Endpoints: []discoveryv1.Endpoint{ep("node-3", ptr.To(true)), ep("", ptr.To(true))}},
	}
	if got, want := lbuEndpointNodes(items), []string{"node-1", "node-3"}; !slices.Equal(got, want) {
		t.Errorf("nodes with endpoints %v, want %v (ready or unset, once each, sorted; not-ready and nodeless left out)", got, want)
	}
}

func TestLBUSchedulableAndOtherNode(t *testing.T) {
	node := func(name string, ready bool, edit func(*corev1.Node)) corev1.Node {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
		if edit != nil {
			edit(&n)
		}
		return n
	}
	nodes := []corev1.Node{
		node("node-c", true, nil),
		node("node-a", true, nil),
		node("node-b", false, nil),
		node("node-d", true, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("node-e", true, func(n *corev1.Node) { n.Labels[lbExcludeLabel] = "true" }),
		node("node-f", true, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "node.cloudprovider.kubernetes.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}
		}),
		node("node-g", true, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "example.com/soft", Effect: corev1.TaintEffectPreferNoSchedule}}
		}),
	}
	var ok []string
	for i := range nodes {
		if lbuSchedulable(&nodes[i]) {
			ok = append(ok, nodes[i].Name)
		}
	}
	if want := []string{"node-c", "node-a", "node-g"}; !slices.Equal(ok, want) {
		t.Errorf("schedulable %v, want %v", ok, want)
	}
	sched := []corev1.Node{nodes[0], nodes[1]}
	for _, tc := range []struct{ current, want string }{{"node-a", "node-c"}, {"node-c", "node-a"}, {"node-x", "node-a"}} {
		if got, _ := lbuOtherNode(sched, tc.current); got != tc.want {
			t.Errorf("other node than %s: %q, want %q", tc.current, got, tc.want)
		}
	}
	if got, ok := lbuOtherNode(sched[:1], "node-c"); ok {
		t.Errorf("one node only: got %q, want none", got)
	}
}

func TestLBUPodOf(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"lb-rolling-7d9c5b-abcde", "lb-rolling-7d9c5b-abcde"},
		{"hello from ns-1/lb-rolling-7d9c5b-abcde (10.244.1.5 on node-2) through node-2; service ns-1/lb-rolling, client 127.0.0.1:40000", "lb-rolling-7d9c5b-abcde"},
		{"node-1/ns-1/lb-rolling-7d9c5b-abcde: hostname", "lb-rolling-7d9c5b-abcde"},
		// The Service's own name, or another Deployment's pod, is no pod of it.
		{"service ns-1/lb-rolling, client 127.0.0.1:1", ""},
		{"xlb-rolling-7d9c5b-abcde", ""},
		{"lb-rolling-", ""},
		{"", ""},
	} {
		got, ok := lbuPodOf(tc.body, "lb-rolling")
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("lbuPodOf(%q) = %q, %v; want %q", tc.body, got, ok, tc.want)
		}
	}
}

func TestLBUMovedOn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []string
		want    bool
	}{
		{"still the old pod", []string{"old", "old", "old"}, false},
		{"a gap, then the new pod 3 times", []string{"old", "", "", "new", "new", "new"}, true},
		{"the new pod, but a gap in the last 3", []string{"new", "new", "", "new", "new"}, false},
		{"back to the old pod", []string{"new", "new", "old"}, false},
		{"two new pods alternating", []string{"new1", "new2", "new1"}, false},
		{"too few answers", []string{"new", "new"}, false},
	} {
		if got, detail := lbuMovedOn(tc.history, "old", 3); got != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, detail, tc.want)
		}
	}
}

func TestLBFromPodVerdict(t *testing.T) {
	client := netip.MustParseAddr("10.244.2.7")
	proxy, vip := corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP
	for _, tc := range []struct {
		name               string
		hostname, clientip string
		mode               *corev1.LoadBalancerIPMode
		want               bool
	}{
		{"served, source kept", "srv", "10.244.2.7:41234", nil, true},
		{"served, source kept, ipMode VIP", "srv", "10.244.2.7:41234", &vip, true},
		{"IPv6 client", "srv", "[fd10::7]:41234", nil, false},
		{"source NAT to the node", "srv", "10.90.0.3:5000", nil, false},
		{"another pod answered", "other", "10.244.2.7:41234", nil, false},
		{"no address in the answer", "srv", "hello", nil, false},
		{"ipMode Proxy: any source", "srv", "10.90.0.1:5000", &proxy, true},
		{"ipMode Proxy still needs the server", "other", "10.90.0.1:5000", &proxy, false},
	} {
		if got, detail := lbFromPodVerdict(tc.hostname, tc.clientip, "srv", client, tc.mode); got != tc.want {
			t.Errorf("%s: verdict %v (%s), want %v", tc.name, got, detail, tc.want)
		}
	}
}

func TestParseDial(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		err       bool
	}{
		{`{"responses":["pod-a"]}`, "pod-a", false},
		{`{"errors":["dial tcp 10.0.0.1:80: i/o timeout"]}`, "", true},
		{`{}`, "", true},
		{`hello from ns/pod`, "", true},
	} {
		got, err := parseDial([]byte(tc.raw))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("parseDial(%s) = %q, %v; want %q, error %v", tc.raw, got, err, tc.want, tc.err)
		}
	}
}
