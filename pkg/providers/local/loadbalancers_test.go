package local

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestListenersAndCheck(t *testing.T) {
	tcp80 := cloud.LoadBalancerPort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}
	udp53 := cloud.LoadBalancerPort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053}
	noNP := cloud.LoadBalancerPort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	local := &cloud.HealthCheck{Path: "/healthz", NodePort: 32000}
	for _, tc := range []struct {
		name      string
		spec      cloud.LoadBalancerSpec
		listeners []api.Listener
		check     api.HealthCheck
	}{
		{"NodePorts, ETP=Cluster: TCP connect to them", cloud.LoadBalancerSpec{Ports: []cloud.LoadBalancerPort{tcp80, udp53}},
			[]api.Listener{{Name: "http", Protocol: "TCP", Port: 80, BackendPort: 30080}, {Name: "dns", Protocol: "UDP", Port: 53, BackendPort: 30053}},
			api.HealthCheck{Type: api.HealthCheckTCP}},
		{"ETP=Local: its healthCheckNodePort", cloud.LoadBalancerSpec{Ports: []cloud.LoadBalancerPort{tcp80}, HealthCheck: local},
			[]api.Listener{{Name: "http", Protocol: "TCP", Port: 80, BackendPort: 30080}},
			api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: 32000}},
		{"no NodePorts, ETP=Cluster: kube-proxy's health (routed)", cloud.LoadBalancerSpec{Ports: []cloud.LoadBalancerPort{noNP}},
			[]api.Listener{{Name: "http", Protocol: "TCP", Port: 80}},
			api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: KubeProxyHealthzPort}},
		{"no NodePorts, ETP=Local: still its healthCheckNodePort", cloud.LoadBalancerSpec{Ports: []cloud.LoadBalancerPort{noNP}, HealthCheck: local},
			[]api.Listener{{Name: "http", Protocol: "TCP", Port: 80}},
			api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: 32000}},
		{"one port without a NodePort among others: routed, kube-proxy's health", cloud.LoadBalancerSpec{Ports: []cloud.LoadBalancerPort{udp53, noNP}},
			[]api.Listener{{Name: "dns", Protocol: "UDP", Port: 53, BackendPort: 30053}, {Name: "http", Protocol: "TCP", Port: 80}},
			api.HealthCheck{Type: api.HealthCheckHTTP, Path: "/healthz", Port: KubeProxyHealthzPort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, hc := listenersAndCheck(&tc.spec)
			if !reflect.DeepEqual(ls, tc.listeners) {
				t.Errorf("listeners %+v, want %+v", ls, tc.listeners)
			}
			if hc == nil || *hc != tc.check {
				t.Errorf("health check %+v, want %+v", hc, tc.check)
			}
		})
	}
}
