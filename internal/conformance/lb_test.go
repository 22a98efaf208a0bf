package conformance

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

func TestLBPodIn(t *testing.T) {
	pods := []string{"lb-traffic-7d9c5b-abcde", "lb-traffic-7d9c5b-fghij"}
	for _, tc := range []struct {
		body, want string
	}{
		// agnhost /hostname.
		{"lb-traffic-7d9c5b-fghij", "lb-traffic-7d9c5b-fghij"},
		// The kube-proxy stand-in of `portside up`.
		{"hello from ns-1/lb-traffic-7d9c5b-abcde (10.244.1.5 on node-2) through node-2; service ns-1/lb-traffic, client 127.0.0.1:40000", "lb-traffic-7d9c5b-abcde"},
		// Its UDP echo.
		{"node-1/ns-1/lb-traffic-7d9c5b-abcde: hostname", "lb-traffic-7d9c5b-abcde"},
		// A longer name that merely starts with a pod's is not that pod.
		{"lb-traffic-7d9c5b-abcdex", ""},
		{"xlb-traffic-7d9c5b-abcde", ""},
		{"no endpoints", ""},
	} {
		got, ok := lbPodIn(tc.body, pods)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("lbPodIn(%q) = %q, %v; want %q", tc.body, got, ok, tc.want)
		}
	}
}

func TestLBClientIn(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{"10.0.0.7:51234", "10.0.0.7"},
		{"[2001:db8::1]:51234\n", "2001:db8::1"},
		{"hello from ns/p (10.244.1.5 on node-2) through node-2; service ns/s, client 127.0.0.1:40000", "127.0.0.1"},
		{"hello from ns/p (10.244.1.5 on node-2) through node-2; service ns/s, client [::ffff:127.0.0.1]:40000\n", "127.0.0.1"},
		{"lb-pod-abc", ""},
	} {
		got, ok := lbClientIn(tc.body)
		if tc.want == "" {
			if ok {
				t.Errorf("lbClientIn(%q) = %v; want none", tc.body, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tc.want) {
			t.Errorf("lbClientIn(%q) = %v, %v; want %s", tc.body, got, ok, tc.want)
		}
	}
}

func TestLBFind(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: types.UID("0a1b2c3d-4e5f-6789-abcd-ef0123456789")}}
	other := api.LoadBalancer{Name: "aother", LoadBalancerSpec: api.LoadBalancerSpec{Tags: map[string]string{local.TagServiceName: "ns/s", local.TagServiceUID: "old-uid"}}}
	byName := api.LoadBalancer{Name: "a0a1b2c3d4e5f6789abcdef012345678"}
	byTag := api.LoadBalancer{Name: "custom", LoadBalancerSpec: api.LoadBalancerSpec{Tags: map[string]string{local.TagServiceUID: string(svc.UID)}}}

	if lb := lbFind([]api.LoadBalancer{other}, svc); lb != nil {
		t.Errorf("found %s, the load balancer of an earlier Service of the same name", lb.Name)
	}
	if lb := lbFind([]api.LoadBalancer{other, byName}, svc); lb == nil || lb.Name != byName.Name {
		t.Errorf("by name: got %v, want %s", lb, byName.Name)
	}
	if lb := lbFind([]api.LoadBalancer{byName, byTag}, svc); lb == nil || lb.Name != byTag.Name {
		t.Errorf("by tag: got %v, want %s (the tag wins)", lb, byTag.Name)
	}
}

func TestLBCheckListeners(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080, NodePort: 30001},
		{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 8080, NodePort: 30002},
	}}}
	lb := &api.LoadBalancer{LoadBalancerSpec: api.LoadBalancerSpec{Listeners: []api.Listener{
		{Protocol: api.ProtocolTCP, Port: 8080, BackendPort: 30001},
		{Protocol: api.ProtocolUDP, Port: 8080, BackendPort: 30002},
	}}}
	if msg := lbCheckListeners(lb, svc); msg != "" {
		t.Errorf("both listeners: %s", msg)
	}
	lb.Listeners[1].BackendPort = 30009
	if msg := lbCheckListeners(lb, svc); msg == "" {
		t.Error("a UDP listener to the wrong port passed")
	}
	lb.Listeners = lb.Listeners[:1]
	if msg := lbCheckListeners(lb, svc); msg == "" {
		t.Error("a missing UDP listener passed")
	}
}

func TestLBHealthyNames(t *testing.T) {
	now := time.Now()
	h := &api.LoadBalancerHealth{Backends: []api.BackendHealth{
		{Name: "node-3", Healthy: true, LastChecked: now},
		{Name: "node-1", Healthy: true, LastChecked: now},
		{Name: "node-2", Healthy: false, LastChecked: now},
		{Name: "node-4", Healthy: true},                                   // not checked yet
		{Name: "node-5", Healthy: true, Draining: true, LastChecked: now}, // leaving
	}}
	if got, want := lbHealthyNames(h), []string{"node-1", "node-3"}; !slices.Equal(got, want) {
		t.Errorf("healthy %v, want %v", got, want)
	}
}

func TestLBTests(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range LoadBalancerTests() {
		if seen[tc.Name] {
			t.Errorf("test %s twice", tc.Name)
		}
		seen[tc.Name] = true
		if tc.Run == nil || tc.Timeout == 0 || !slices.Contains(tc.Needs, LoadBalancers) {
			t.Errorf("test %s: Run, Timeout and the need %s are required", tc.Name, LoadBalancers)
		}
	}
}

func TestDualStackVerdict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
		ok    bool
		msg   string
	}{
		{"one of each", []string{"198.18.1.2", "fd12::2"}, true, ""},
		{"IPv6 first", []string{"fd12::2", "198.18.1.2"}, true, ""},
		{"IPv4 only", []string{"198.18.1.2"}, false, "1 IPv4 and 0 IPv6"},
		{"two IPv4", []string{"198.18.1.2", "198.18.1.3"}, false, "2 IPv4 and 0 IPv6"},
		{"IPv4-mapped is IPv4", []string{"::ffff:198.18.1.2", "198.18.1.3"}, false, "2 IPv4 and 0 IPv6"},
		{"a hostname", []string{"lb.example", "fd12::2"}, false, `"lb.example" is not an IP address`},
		{"none", nil, false, "0 IPv4 and 0 IPv6"},
	} {
		ok, msg := dualStackVerdict(tc.addrs)
		if ok != tc.ok || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: dualStackVerdict(%v) = %v, %q; want %v, %q", tc.name, tc.addrs, ok, msg, tc.ok, tc.msg)
		}
	}
}

func TestIngressFamiliesVerdict(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, tc := range []struct {
		name     string
		ingress  []string
		families []corev1.IPFamily
		ok       bool
	}{
		{"dual, both", []string{"10.0.0.1", "fd00:1::1"}, []corev1.IPFamily{v4, v6}, true},
		{"dual, IPv6 primary, both in any order", []string{"10.0.0.1", "fd00:1::1"}, []corev1.IPFamily{v6, v4}, true},
		{"dual, one missing", []string{"10.0.0.1"}, []corev1.IPFamily{v4, v6}, false},
		{"IPv6 only", []string{"fd00:1::1"}, []corev1.IPFamily{v6}, true},
		{"IPv6 only, an IPv4 ingress too", []string{"fd00:1::1", "10.0.0.1"}, []corev1.IPFamily{v6}, false},
		{"IPv4 only, got IPv6", []string{"fd00:1::1"}, []corev1.IPFamily{v4}, false},
		{"two of one family", []string{"10.0.0.1", "10.0.0.2"}, []corev1.IPFamily{v4, v6}, false},
		{"hostname", []string{"lb.example.com"}, []corev1.IPFamily{v4}, false},
		{"no families yet", []string{"10.0.0.1"}, nil, false},
		{"no ingress yet", nil, []corev1.IPFamily{v4}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ok, msg := ingressFamiliesVerdict(tc.ingress, tc.families); ok != tc.ok {
				t.Errorf("got %v (%s), want %v", ok, msg, tc.ok)
			}
		})
	}
}

func TestETPLocalFamiliesVerdict(t *testing.T) {
	now := time.Now()
	be := func(name, addr string, healthy bool) api.BackendHealth {
		return api.BackendHealth{Name: name, Address: addr, Healthy: healthy, LastChecked: now}
	}
	for _, tc := range []struct {
		name string
		bs   []api.BackendHealth
		ok   bool
	}{
		{"the node's two families", []api.BackendHealth{be("a", "10.0.0.1", true), be("a", "fd00:1::1", true), be("b", "10.0.0.2", false), be("b", "fd00:1::2", false)}, true},
		{"only IPv4 healthy", []api.BackendHealth{be("a", "10.0.0.1", true), be("a", "fd00:1::1", false)}, false},
		{"another node healthy on IPv6", []api.BackendHealth{be("a", "10.0.0.1", true), be("a", "fd00:1::1", true), be("b", "fd00:1::2", true)}, false},
		{"unchecked", []api.BackendHealth{be("a", "10.0.0.1", true), {Name: "a", Address: "fd00:1::1", Healthy: true}}, false},
		{"draining", []api.BackendHealth{be("a", "10.0.0.1", true), {Name: "a", Address: "fd00:1::1", Healthy: true, Draining: true, LastChecked: now}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ok, msg := etpLocalFamiliesVerdict(&api.LoadBalancerHealth{Backends: tc.bs}, "a"); ok != tc.ok {
				t.Errorf("got %v (%s), want %v", ok, msg, tc.ok)
			}
		})
	}
}
