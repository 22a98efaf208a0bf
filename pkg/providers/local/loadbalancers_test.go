package local

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func TestDataPath(t *testing.T) {
	svc := func(ann map[string]string) *cloud.LoadBalancerSpec {
		return &cloud.LoadBalancerSpec{Object: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}}
	}
	for _, tc := range []struct {
		name    string
		spec    *cloud.LoadBalancerSpec
		want    string
		wantErr string
	}{
		{"no Service object: the cloud's default", &cloud.LoadBalancerSpec{}, "", ""},
		{"no annotation: the cloud's default", svc(nil), "", ""},
		{"proxy", svc(map[string]string{AnnotationDataPath: "proxy"}), api.DataPathProxy, ""},
		{"kernel, any case and spaces", svc(map[string]string{AnnotationDataPath: " Kernel "}), api.DataPathKernel, ""},
		{"anything else is refused, naming the annotation", svc(map[string]string{AnnotationDataPath: "ebpf"}), "",
			`annotation service.beta.kubernetes.io/portside-load-balancer-data-path="ebpf": use "kernel" (the default) or "proxy"`},
		{"empty is refused too (a typo, not a choice)", svc(map[string]string{AnnotationDataPath: ""}), "", "use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dataPath(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("dataPath = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestNotDeletableFor(t *testing.T) {
	tags := map[string]string{TagServiceName: "default/web", TagServiceUID: "uid-1", TagClusterUID: "cluster-1"}
	for _, tc := range []struct {
		name string
		tags map[string]string
		spec cloud.LoadBalancerSpec
		ok   bool
	}{
		{"its own", tags, cloud.LoadBalancerSpec{UID: "uid-1", ClusterUID: "cluster-1"}, true},
		{"another Service's", tags, cloud.LoadBalancerSpec{UID: "uid-2", ClusterUID: "cluster-1"}, false},
		{"another cluster's", tags, cloud.LoadBalancerSpec{UID: "uid-1", ClusterUID: "cluster-2"}, false},
		{"our cluster UID unknown", tags, cloud.LoadBalancerSpec{UID: "uid-1"}, true},
		{"untagged (made before the tags)", map[string]string{}, cloud.LoadBalancerSpec{UID: "uid-2", ClusterUID: "cluster-2"}, true},
	} {
		if why := NotDeletableFor(tc.tags, &tc.spec); (why == "") != tc.ok {
			t.Errorf("%s: NotDeletableFor = %q, want deletable %v", tc.name, why, tc.ok)
		}
	}
}
