package console

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

func TestNodeStatus(t *testing.T) {
	taint := func(k string) corev1.Taint { return corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule} }
	for _, tc := range []struct {
		name       string
		providerID string
		taints     []corev1.Taint
		labels     map[string]string
		conds      []corev1.NodeCondition
		wantInit   bool
		wantWhy    string
	}{
		{name: "initialized", providerID: "local://i-1", wantInit: true},
		{name: "uninitialized taint", providerID: "", taints: []corev1.Taint{taint(node.TaintUninitialized)},
			wantWhy: "waiting for the cloud controller manager (node.cloudprovider.kubernetes.io/uninitialized taint)"},
		{name: "taint wins over providerID", providerID: "local://i-1", taints: []corev1.Taint{taint(node.TaintUninitialized)},
			wantWhy: "waiting for the cloud controller manager (node.cloudprovider.kubernetes.io/uninitialized taint)"},
		{name: "no providerID", wantWhy: "no providerID: not initialized by a cloud controller manager"},
		{name: "shut down", providerID: "local://i-1", taints: []corev1.Taint{taint(nodelifecycle.TaintShutdown)}, wantInit: true, wantWhy: "instance shut down"},
		{name: "excluded", providerID: "local://i-1", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "true"}, wantInit: true, wantWhy: "excluded from load balancers"},
		{name: "exclusion false", providerID: "local://i-1", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "false"}, wantInit: true},
		{name: "unparsable exclusion excludes, as upstream", providerID: "local://i-1", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "yes"}, wantInit: true, wantWhy: "excluded from load balancers"},
		{name: "no route", providerID: "local://i-1", conds: []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated"}},
			wantInit: true, wantWhy: "no route yet (NoRouteCreated)"},
		{name: "route created", providerID: "local://i-1", conds: []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated"}}, wantInit: true},
		{name: "several notes", providerID: "local://i-1", taints: []corev1.Taint{taint(nodelifecycle.TaintShutdown)}, labels: map[string]string{corev1.LabelNodeExcludeBalancers: "1"},
			wantInit: true, wantWhy: "instance shut down; excluded from load balancers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels},
				Spec: corev1.NodeSpec{ProviderID: tc.providerID, Taints: tc.taints}, Status: corev1.NodeStatus{Conditions: tc.conds}}
			init, why := nodeStatus(n)
			if init != tc.wantInit || why != tc.wantWhy {
				t.Errorf("nodeStatus = %v, %q; want %v, %q", init, why, tc.wantInit, tc.wantWhy)
			}
		})
	}
}

func TestServiceJoin(t *testing.T) {
	svc := func(name, uid string, ingress string, class *string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: "uid-" + "x"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class,
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080}}}}
		s.UID = types.UID("uid-" + uid)
		if ingress != "" {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}}
		}
		return s
	}
	lb := func(name, svcName, uid, vip string, healthy ...bool) LoadBalancer {
		l := LoadBalancer{LoadBalancer: api.LoadBalancer{Name: name, VIPs: []string{vip},
			LoadBalancerSpec: api.LoadBalancerSpec{Tags: map[string]string{}}}}
		if svcName != "" {
			l.Tags[local.TagServiceName], l.Tags[local.TagServiceUID] = svcName, "uid-"+uid
		}
		for i, h := range healthy {
			l.Health.Backends = append(l.Health.Backends, api.BackendHealth{Name: "node-" + string(rune('1'+i)), Healthy: h})
		}
		return l
	}
	lbs := []LoadBalancer{
		lb("lb-web", "default/web", "1", "127.100.0.1", true, false),
		lb("lb-web-other-cluster", "default/web", "other", "127.100.0.9", true),
		lb("lb-untagged", "", "", "127.100.0.2", false),
	}
	for _, tc := range []struct {
		name       string
		svc        *corev1.Service
		wantLB     string
		wantStatus string
	}{
		{"tags with UID", svc("web", "1", "127.100.0.1", nil), "lb-web", "serving: 1/2 backends healthy"},
		{"same name, other UID: not ours, no VIP", svc("web", "2", "", nil), "", "pending: no load balancer yet"},
		{"untagged, matched by VIP", svc("db", "3", "127.100.0.2", nil), "lb-untagged", "serving nothing: no healthy backend"},
		{"ingress from elsewhere", svc("db", "3", "192.0.2.1", nil), "", "ingress set, but no load balancer in this cloud has its address"},
		{"other class", svc("x", "4", "", ptr.To("example.com/lb")), "", "class example.com/lb: served by another controller"},
		{"tagged, no ingress yet", svc("web", "1", "", nil), "lb-web", "load balancer exists, ingress not yet written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := serviceView(tc.svc, nil, lbs)
			if v.LoadBalancer != tc.wantLB || v.Status != tc.wantStatus {
				t.Errorf("got %q %q, want %q %q", v.LoadBalancer, v.Status, tc.wantLB, tc.wantStatus)
			}
		})
	}

	// Pods come from the Service's EndpointSlices.
	eps := []*discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("node-1"), TargetRef: &corev1.ObjectReference{Name: "web-1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.244.2.5"}, NodeName: ptr.To("node-2"), TargetRef: &corev1.ObjectReference{Name: "web-2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		}}}
	st := buildClusterState([]*corev1.Service{svc("web", "1", "127.100.0.1", nil), {ObjectMeta: metav1.ObjectMeta{Name: "cluster-ip"}}}, nil, eps, lbs)
	if len(st.Services) != 1 {
		t.Fatalf("services %+v: want only the LoadBalancer one", st.Services)
	}
	pods := st.Services[0].Pods
	if len(pods) != 2 || pods[0] != (PodView{Name: "web-1", Node: "node-1", IP: "10.244.1.5", Ready: true}) || pods[1].Ready {
		t.Errorf("pods %+v", pods)
	}
	if got := st.Services[0].Ports; len(got) != 1 || got[0] != "80/TCP→30080" {
		t.Errorf("ports %v", got)
	}
}
