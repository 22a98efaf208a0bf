package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lbService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053}},
		},
	}
}

func TestLoadBalancerNameMatchesUpstream(t *testing.T) {
	// upstream: "a" + UID without dashes, cut to 32 characters.
	if got, want := LoadBalancerName("1b4e28ba-2fa1-11d2-883f-0016d3cca427"), "a1b4e28ba2fa111d2883f0016d3cca42"; got != want {
		t.Fatalf("LoadBalancerName = %q, want %q", got, want)
	}
}

func TestSpecFromService(t *testing.T) {
	svc := lbService()
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 32000
	svc.Spec.LoadBalancerSourceRanges = []string{"10.0.0.1/8", " 2001:db8::/32"}
	spec, err := SpecFromService("prod", svc)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Cluster != "prod" || spec.Service.String() != "ns/web" || spec.Name != LoadBalancerName(svc.UID) {
		t.Fatalf("identity wrong: %+v", spec)
	}
	if len(spec.Ports) != 2 || spec.Ports[0].Protocol != corev1.ProtocolTCP || spec.Ports[1].Protocol != corev1.ProtocolUDP || spec.Ports[1].NodePort != 30053 {
		t.Fatalf("ports = %+v", spec.Ports)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	if fmt.Sprint(spec.SourceRanges) != fmt.Sprint(want) {
		t.Fatalf("source ranges = %v, want %v (masked)", spec.SourceRanges, want)
	}
	if spec.HealthCheck == nil || *spec.HealthCheck != (HealthCheck{Path: "/healthz", NodePort: 32000}) {
		t.Fatalf("health check = %+v", spec.HealthCheck)
	}
}

func TestSourceRangesFromAnnotationAndErrors(t *testing.T) {
	svc := lbService()
	svc.Annotations = map[string]string{AnnotationLoadBalancerSourceRanges: "192.168.0.0/16, 10.1.0.0/16"}
	got, err := SourceRanges(svc)
	if err != nil || len(got) != 2 || got[1].String() != "10.1.0.0/16" {
		t.Fatalf("annotation ranges = %v, %v", got, err)
	}
	// The field wins over the annotation.
	svc.Spec.LoadBalancerSourceRanges = []string{"1.2.3.0/24"}
	if got, _ := SourceRanges(svc); len(got) != 1 || got[0].String() != "1.2.3.0/24" {
		t.Fatalf("field must win, got %v", got)
	}
	svc.Spec.LoadBalancerSourceRanges = []string{"1.2.3.4"}
	_, err = SourceRanges(svc)
	if err == nil || !strings.Contains(err.Error(), `"1.2.3.4" is not a CIDR`) || !strings.Contains(err.Error(), "spec.loadBalancerSourceRanges") {
		t.Fatalf("want an error naming the field and value, got %v", err)
	}
	if _, err := SpecFromService("c", svc); err == nil {
		t.Fatal("SpecFromService must reject a bad source range")
	}
}

func TestSpecFromServiceNeedsNodePorts(t *testing.T) {
	svc := lbService()
	svc.Spec.Ports[0].NodePort = 0
	if _, err := SpecFromService("c", svc); err == nil || !strings.Contains(err.Error(), "80/TCP has no nodePort") {
		t.Fatalf("got %v", err)
	}
	no := false
	svc.Spec.AllocateLoadBalancerNodePorts = &no
	if _, err := SpecFromService("c", svc); err != nil {
		t.Fatalf("allocateLoadBalancerNodePorts=false allows no nodePort: %v", err)
	}
}

func TestProviderID(t *testing.T) {
	if got := ProviderID("local", "i-1"); got != "local://i-1" {
		t.Fatal(got)
	}
	if id, err := ParseProviderID("local", "local://i-1"); err != nil || id != "i-1" {
		t.Fatalf("%q %v", id, err)
	}
	for _, bad := range []string{"", "local:/i-1", "local://", "aws://i-1"} {
		if _, err := ParseProviderID("local", bad); err == nil {
			t.Errorf("ParseProviderID(%q) should fail", bad)
		}
	}
}

func TestErrors(t *testing.T) {
	err := fmt.Errorf("lb x: %w", RetryAfter(3*time.Second, "provisioning %s", "x"))
	if d, ok := IsRetryAfter(err); !ok || d != 3*time.Second {
		t.Fatalf("IsRetryAfter = %v %v", d, ok)
	}
	if _, ok := IsRetryAfter(errors.New("x")); ok {
		t.Fatal("plain error is not retry-after")
	}
	if !IsNotFound(fmt.Errorf("instance i: %w", ErrNotFound)) || IsNotFound(ErrNotImplemented) {
		t.Fatal("IsNotFound wrong")
	}
	if !IsNotImplemented(fmt.Errorf("x: %w", ErrNotImplemented)) {
		t.Fatal("IsNotImplemented wrong")
	}
}

type nullProvider struct{ name string }

func (n nullProvider) ProviderName() string                           { return n.name }
func (nullProvider) Instances() (Instances, bool)                     { return nil, false }
func (nullProvider) LoadBalancers() (LoadBalancers, bool)             { return nil, false }
func (nullProvider) Routes() (Routes, bool)                           { return nil, false }
func (nullProvider) Volumes() (Volumes, bool)                         { return nil, false }
func (nullProvider) RegistryCredentials() (RegistryCredentials, bool) { return nil, false }

func TestRegistry(t *testing.T) {
	var gotConfig string
	factory := func(_ context.Context, cfg io.Reader) (Provider, error) {
		if cfg != nil {
			b, _ := io.ReadAll(cfg)
			gotConfig = string(b)
		}
		return nullProvider{"test-registry"}, nil
	}
	if err := Register("test-registry", factory); err != nil {
		t.Fatal(err)
	}
	if err := Register("test-registry", factory); err == nil {
		t.Fatal("duplicate registration must fail")
	}
	cfg := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(cfg, []byte("key: value"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), "test-registry", cfg)
	if err != nil || p.ProviderName() != "test-registry" || gotConfig != "key: value" {
		t.Fatalf("New: %v %v %q", p, err, gotConfig)
	}
	if _, err := New(context.Background(), "nope", ""); err == nil || !strings.Contains(err.Error(), `unknown cloud provider "nope"`) || !strings.Contains(err.Error(), "test-registry") {
		t.Fatalf("unknown provider error must list the registered ones: %v", err)
	}
	if _, err := New(context.Background(), "test-registry", "/does/not/exist"); err == nil || !strings.Contains(err.Error(), "--cloud-config") {
		t.Fatalf("unreadable config error: %v", err)
	}
	if c := Discover(p); c.Instances || c.LoadBalancers || c.Routes {
		t.Fatalf("Discover = %+v", c)
	}
}
