// Package cloud tests the local provider and the upstream adapters against
// a real local cloud (in-process API, real load balancers on loopback).
package cloud

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/nettest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

func newProvider(t *testing.T) (*localcloudtest.Cloud, cloud.Provider) {
	t.Helper()
	lc := localcloudtest.Start(t)
	cfg := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := cloud.New(context.Background(), local.ProviderName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lc, p
}

func TestLocalProviderConfigErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("endpoint: http://x\ntokne: y\n"), 0o600)
	if _, err := cloud.New(context.Background(), "local", bad); err == nil || !strings.Contains(err.Error(), "tokne") {
		t.Fatalf("unknown config field must be named: %v", err)
	}
	if _, err := cloud.New(context.Background(), "local", ""); err == nil || !strings.Contains(err.Error(), "--cloud-config") {
		t.Fatalf("missing config: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "cloud")
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	_ = os.WriteFile(cfg, []byte("dataDir: "+dir+"\n"), 0o600)
	if _, err := cloud.New(context.Background(), "local", cfg); err == nil || !strings.Contains(err.Error(), "portside cloud serve") {
		t.Fatalf("dataDir without a running cloud: %v", err)
	}
}

func TestLocalProviderInstances(t *testing.T) {
	lc, p := newProvider(t)
	ctx := context.Background()
	created, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a", Zone: "zone-b", Type: "medium", IPv6: true,
		Labels: map[string]string{"example.com/rack": "r7"}})
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := p.Instances()
	// A node without providerID is found by name.
	md, err := inst.InstanceMetadata(ctx, cloud.Node{Name: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "local://"+created.ID || md.InstanceType != "medium" || md.Zone != "zone-b" || md.Region != "region-1" ||
		md.AdditionalLabels["example.com/rack"] != "r7" {
		t.Fatalf("metadata = %+v", md)
	}
	var v4, v6 bool
	for _, a := range md.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip := netip.MustParseAddr(a.Address)
			v4, v6 = v4 || ip.Is4(), v6 || ip.Is6()
		}
	}
	if !v4 || !v6 {
		t.Fatalf("want dual-stack InternalIPs, got %v", md.Addresses)
	}
	byID := cloud.Node{Name: "renamed", ProviderID: md.ProviderID}
	if ok, err := inst.InstanceExists(ctx, byID); !ok || err != nil {
		t.Fatalf("exists = %v %v", ok, err)
	}
	_, _ = lc.Client.StopInstance(ctx, created.ID)
	if down, err := inst.InstanceShutdown(ctx, byID); !down || err != nil {
		t.Fatalf("shutdown = %v %v", down, err)
	}
	// The cloud failing is an error, never "the instance is gone".
	_ = lc.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "GET", PathPrefix: "/v1/instances", ErrorRate: 1}}})
	if ok, err := inst.InstanceExists(ctx, byID); ok || err == nil || cloud.IsNotFound(err) {
		t.Fatalf("exists with a failing cloud = %v %v, want a plain error", ok, err)
	}
	_ = lc.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "GET", PathPrefix: "/v1/instances", ThrottleRate: 1, RetryAfterSeconds: 3}}})
	if _, err := inst.InstanceMetadata(ctx, byID); err == nil {
		t.Fatal("throttled call succeeded")
	} else if d, ok := cloud.IsRetryAfter(err); !ok || d != 3*time.Second {
		t.Fatalf("throttling must be a RetryAfterError of 3s: %v", err)
	}
	_ = lc.Client.SetFaults(ctx, api.Faults{})
	_ = lc.Client.DeleteInstance(ctx, created.ID)
	if ok, err := inst.InstanceExists(ctx, byID); ok || err != nil {
		t.Fatalf("exists after delete = %v %v, want false nil", ok, err)
	}
	if ok, err := inst.InstanceExists(ctx, cloud.Node{Name: "node-a"}); ok || err != nil {
		t.Fatalf("exists by name after delete = %v %v, want false nil", ok, err)
	}
	if _, err := inst.InstanceMetadata(ctx, byID); !cloud.IsNotFound(err) {
		t.Fatalf("metadata after delete: %v", err)
	}
	if _, err := inst.InstanceMetadata(ctx, cloud.Node{Name: "x", ProviderID: "aws://i-1"}); err == nil {
		t.Fatal("a foreign providerID must be rejected")
	}
}

// twoNodes creates two instances with NodePort listeners and returns their
// Kubernetes Nodes and the NodePort.
func twoNodes(t *testing.T, lc *localcloudtest.Cloud) ([]*corev1.Node, int) {
	t.Helper()
	var nodes []*corev1.Node
	port := 0
	for _, name := range []string{"node-a", "node-b"} {
		inst, err := lc.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
		if err != nil {
			t.Fatal(err)
		}
		ip := inst.Addresses[0].Address
		port = nettest.NameServer(t, name, net.JoinHostPort(ip, fmt.Sprint(port))).Addr().(*net.TCPAddr).Port
		nodes = append(nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.NodeSpec{ProviderID: "local://" + inst.ID},
			Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
		})
	}
	return nodes, port
}

func lbService(nodePort int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "6f1f2c1e-0000-4000-8000-000000000001"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080, NodePort: int32(nodePort)}}},
	}
}

func TestLocalProviderLoadBalancerCarriesTraffic(t *testing.T) {
	lc, p := newProvider(t)
	ctx := context.Background()
	nodes, port := twoNodes(t, lc)
	lbs, _ := p.LoadBalancers()
	spec, err := cloud.SpecFromService("c1", lbService(port))
	if err != nil {
		t.Fatal(err)
	}
	hosts := []cloud.Host{cloud.Host(cloud.NodeFrom(nodes[0])), cloud.Host(cloud.NodeFrom(nodes[1]))}
	st, err := lbs.EnsureLoadBalancer(ctx, spec, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != corev1.LoadBalancerIPModeVIP ||
		len(st.Ingress[0].Ports) != 1 || !lc.VIPPool.Contains(netip.MustParseAddr(st.Ingress[0].IP)) {
		t.Fatalf("status = %+v", st)
	}
	vip := net.JoinHostPort(st.Ingress[0].IP, "8080")
	seen := map[string]bool{}
	for range 10 {
		name, err := nettest.AskName(vip)
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
	}
	if !seen["node-a"] || !seen["node-b"] {
		t.Fatalf("both nodes should answer: %v", seen)
	}
	if err := lbs.UpdateLoadBalancerHosts(ctx, spec, hosts[1:]); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if name, err := nettest.AskName(vip); err != nil || name != "node-b" {
			t.Fatalf("after removing node-a: %q %v", name, err)
		}
	}
	got, exists, err := lbs.GetLoadBalancer(ctx, spec)
	if err != nil || !exists || got.Ingress[0].IP != st.Ingress[0].IP {
		t.Fatalf("get = %+v %v %v", got, exists, err)
	}
	lb, _ := lc.Client.GetLoadBalancer(ctx, spec.Name)
	if lb.Tags[local.TagServiceName] != "default/web" || lb.Cluster != "c1" {
		t.Fatalf("load balancer not tagged with its Service and cluster: %+v", lb)
	}
	// A spec of another Service that happens to have the name: the tags
	// say the load balancer is not its to delete.
	other := *spec
	other.UID = "6f1f2c1e-0000-4000-8000-00000000000f"
	if err := lbs.EnsureLoadBalancerDeleted(ctx, &other); err == nil || !strings.Contains(err.Error(), "tagged for Service default/web") {
		t.Fatalf("deleting with another Service's UID: %v, want a refusal naming the Service it is tagged for", err)
	}
	if _, exists, err := lbs.GetLoadBalancer(ctx, spec); !exists || err != nil {
		t.Fatalf("after the refused delete: exists %v, %v", exists, err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, spec); err != nil {
		t.Fatalf("deleting twice must succeed: %v", err)
	}
	if _, exists, err := lbs.GetLoadBalancer(ctx, spec); exists || err != nil {
		t.Fatalf("after delete: %v %v", exists, err)
	}
	if _, err := nettest.AskName(vip); err == nil {
		t.Fatal("VIP still serves after delete")
	}
}

func TestLocalProviderRoutesVolumesCredentials(t *testing.T) {
	lc, p := newProvider(t)
	ctx := context.Background()
	if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a", Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	r, _ := p.Routes()
	v4 := cloud.Route{TargetNode: "node-a", DestinationCIDR: netip.MustParsePrefix("10.244.3.0/24"), ClusterUID: "cluster-uid-1"}
	v6 := cloud.Route{TargetNode: "node-a", DestinationCIDR: netip.MustParsePrefix("fd00:244:3::/64"), ClusterUID: "cluster-uid-1"}
	for _, rt := range []cloud.Route{v4, v6, v4} { // creating twice is idempotent
		if err := r.CreateRoute(ctx, "c1", "uid-a", rt); err != nil {
			t.Fatal(err)
		}
	}
	list, err := r.ListRoutes(ctx, "c1")
	if err != nil || len(list) != 2 {
		t.Fatalf("routes = %+v %v", list, err)
	}
	for _, rt := range list {
		if rt.ClusterUID != "cluster-uid-1" {
			t.Errorf("route %s lists cluster UID %q, want the one it was made with", rt.Name, rt.ClusterUID)
		}
	}
	for _, rt := range list {
		if err := r.DeleteRoute(ctx, "c1", rt); err != nil {
			t.Fatal(err)
		}
	}
	if list, _ := r.ListRoutes(ctx, "c1"); len(list) != 0 {
		t.Fatalf("routes left: %+v", list)
	}

	vol, err := lc.Client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "pgdata", Zones: []string{"zone-c"}, SizeGiB: 5})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := p.Volumes()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: local.CSIDriver, VolumeHandle: vol.ID}}}}
	topo, err := v.VolumeTopology(ctx, pv)
	if err != nil || fmt.Sprint(topo.Zones) != "[zone-c]" || topo.Region != "region-1" {
		t.Fatalf("topology = %+v %v", topo, err)
	}
	pv.Spec.CSI.Driver = "ebs.csi.aws.com"
	if _, err := v.VolumeTopology(ctx, pv); !cloud.IsNotImplemented(err) {
		t.Fatalf("a foreign volume is not ours: %v", err)
	}

	creds, _ := p.RegistryCredentials()
	if _, err := creds.RegistryCredential(ctx, cloud.RegistryCredentialRequest{Image: "registry.local:5000/app:1"}); !cloud.IsNotFound(err) {
		t.Fatalf("unknown registry: %v", err)
	}
	_, _ = lc.Client.CreateRegistry(ctx, "registry.local:5000")
	c, err := creds.RegistryCredential(ctx, cloud.RegistryCredentialRequest{Image: "registry.local:5000/app:1"})
	if err != nil || c.Registry != "registry.local:5000" || c.Password == "" || c.ExpiresAt.IsZero() {
		t.Fatalf("credential = %+v %v", c, err)
	}
	if caps := cloud.Discover(p); !caps.Instances || !caps.LoadBalancers || !caps.Routes || !caps.Volumes || !caps.RegistryCredentials ||
		!caps.LoadBalancerFeature.SupportsProtocol(corev1.ProtocolUDP) {
		t.Fatalf("capabilities = %+v", caps)
	}
}
