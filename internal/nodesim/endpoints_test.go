package nodesim

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func slice(name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, AddressType: discoveryv1.AddressTypeIPv4, Ports: ports, Endpoints: eps}
}

func ep(pod, node, ip string, ready *bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if node != "" {
		e.NodeName = ptr.To(node)
	}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod}
	}
	return e
}

func TestReadyEndpoints(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	httpPorts := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}
	for _, tc := range []struct {
		name   string
		port   corev1.ServicePort
		slices []*discoveryv1.EndpointSlice
		want   []Endpoint
	}{
		{"no slices", http, nil, nil},
		{"ready true and unset count, false does not", http, []*discoveryv1.EndpointSlice{slice("a", httpPorts,
			ep("p1", "n1", "10.0.0.1", ptr.To(true)), ep("p2", "n2", "10.0.0.2", nil), ep("p3", "n1", "10.0.0.3", ptr.To(false)))},
			[]Endpoint{{Pod: "ns/p1", Node: "n1", IP: "10.0.0.1"}, {Pod: "ns/p2", Node: "n2", IP: "10.0.0.2"}}},
		{"a slice without the port's name serves nothing for it", http, []*discoveryv1.EndpointSlice{slice("a",
			[]discoveryv1.EndpointPort{{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)}}, ep("p1", "n1", "10.0.0.1", nil))}, nil},
		{"protocol must match (unset is TCP)", corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP}, []*discoveryv1.EndpointSlice{slice("a",
			[]discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](53)}}, ep("p1", "n1", "10.0.0.1", nil))}, nil},
		{"an unnamed port matches an unnamed slice port", corev1.ServicePort{Port: 80}, []*discoveryv1.EndpointSlice{slice("a",
			[]discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}, ep("p1", "n1", "10.0.0.1", nil))},
			[]Endpoint{{Pod: "ns/p1", Node: "n1", IP: "10.0.0.1"}}},
		{"the same pod in two slices counts once", http, []*discoveryv1.EndpointSlice{
			slice("a", httpPorts, ep("p1", "n1", "10.0.0.1", nil)), slice("b", httpPorts, ep("p1", "n1", "10.0.0.1", nil))},
			[]Endpoint{{Pod: "ns/p1", Node: "n1", IP: "10.0.0.1"}}},
		{"an endpoint without a pod is named by its address", http, []*discoveryv1.EndpointSlice{slice("a", httpPorts, ep("", "", "192.0.2.7", nil))},
			[]Endpoint{{Pod: "192.0.2.7", IP: "192.0.2.7"}}},
		{"FQDN slices are skipped", http, []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
			s := slice("a", httpPorts, ep("p1", "n1", "example.com", nil))
			s.AddressType = discoveryv1.AddressTypeFQDN
			return s
		}()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadyEndpoints(tc.slices, tc.port); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNodePortTargets(t *testing.T) {
	eps := []Endpoint{{Pod: "ns/a", Node: "n1"}, {Pod: "ns/b", Node: "n2"}}
	cluster := &corev1.Service{}
	local := &corev1.Service{Spec: corev1.ServiceSpec{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		eps  []Endpoint
		node string
		want int
	}{
		{"cluster: every node forwards to all", cluster, eps, "n3", 2},
		{"cluster without endpoints: refused", cluster, nil, "n1", 0},
		{"local: only the node's own", local, eps, "n1", 1},
		{"local on a node without one: refused", local, eps, "n3", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodePortTargets(tc.svc, tc.eps, tc.node); len(got) != tc.want {
				t.Errorf("got %+v, want %d", got, tc.want)
			}
		})
	}
}
