package manager

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

var errCloud = errors.New("cloud down")

// metricsCloud has every capability; its calls fail with err. Its load
// balancers list only when lister is set.
type metricsCloud struct {
	name   string
	err    error
	lister bool
	noLBs  bool
}

type mcInstances struct{ err error }
type mcLBs struct{ err error }
type mcListingLBs struct{ mcLBs }
type mcRoutes struct{ err error }
type mcVolumes struct{ err error }
type mcCreds struct{ err error }

func (c *metricsCloud) ProviderName() string { return c.name }
func (c *metricsCloud) Instances() (cloud.Instances, bool) {
	return mcInstances{c.err}, true
}
func (c *metricsCloud) LoadBalancers() (cloud.LoadBalancers, bool) {
	switch {
	case c.noLBs:
		return nil, false
	case c.lister:
		return mcListingLBs{mcLBs{c.err}}, true
	}
	return mcLBs{c.err}, true
}
func (c *metricsCloud) Routes() (cloud.Routes, bool)   { return mcRoutes{c.err}, true }
func (c *metricsCloud) Volumes() (cloud.Volumes, bool) { return mcVolumes{c.err}, true }
func (c *metricsCloud) RegistryCredentials() (cloud.RegistryCredentials, bool) {
	return mcCreds{c.err}, true
}

func (i mcInstances) InstanceMetadata(context.Context, cloud.Node) (*cloud.InstanceMetadata, error) {
	return &cloud.InstanceMetadata{}, i.err
}
func (i mcInstances) InstanceExists(context.Context, cloud.Node) (bool, error) { return true, i.err }
func (i mcInstances) InstanceShutdown(context.Context, cloud.Node) (bool, error) {
	return false, cloud.ErrNotImplemented
}
func (mcLBs) Features() cloud.LoadBalancerFeatures {
	return cloud.LoadBalancerFeatures{Protocols: []corev1.Protocol{corev1.ProtocolTCP}, DualStack: true}
}
func (l mcLBs) GetLoadBalancer(context.Context, *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, l.err
}
func (l mcLBs) EnsureLoadBalancer(context.Context, *cloud.LoadBalancerSpec, []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	return &corev1.LoadBalancerStatus{}, l.err
}
func (l mcLBs) UpdateLoadBalancerHosts(context.Context, *cloud.LoadBalancerSpec, []cloud.Host) error {
	return l.err
}
func (l mcLBs) EnsureLoadBalancerDeleted(context.Context, *cloud.LoadBalancerSpec) error {
	return cloud.ErrImplementedElsewhere
}
func (l mcListingLBs) ListLoadBalancers(context.Context, string) ([]cloud.LoadBalancerRef, error) {
	return []cloud.LoadBalancerRef{{Name: "a1"}}, l.err
}
func (r mcRoutes) ListRoutes(context.Context, string) ([]cloud.Route, error) { return nil, r.err }
func (r mcRoutes) CreateRoute(context.Context, string, string, cloud.Route) error {
	return r.err
}
func (r mcRoutes) DeleteRoute(context.Context, string, cloud.Route) error { return r.err }
func (v mcVolumes) VolumeTopology(context.Context, *corev1.PersistentVolume) (*cloud.VolumeTopology, error) {
	return &cloud.VolumeTopology{}, v.err
}
func (c mcCreds) RegistryCredential(context.Context, cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	return &cloud.RegistryCredential{}, c.err
}

// byRequest returns, for the metric family name, each series' value
// (counter value, or histogram sample count) by its request label.
func byRequest(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			req := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "request" {
					req = l.GetValue()
				}
			}
			if h := m.GetHistogram(); h != nil {
				out[req] = float64(h.GetSampleCount())
			} else {
				out[req] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// callAll calls every method of every capability of p once.
func callAll(t *testing.T, p cloud.Provider) {
	t.Helper()
	ctx := context.Background()
	inst, _ := p.Instances()
	_, _ = inst.InstanceMetadata(ctx, cloud.Node{Name: "n"})
	_, _ = inst.InstanceExists(ctx, cloud.Node{Name: "n"})
	_, _ = inst.InstanceShutdown(ctx, cloud.Node{Name: "n"})
	if lbs, ok := p.LoadBalancers(); ok {
		spec := &cloud.LoadBalancerSpec{Name: "a1"}
		_, _, _ = lbs.GetLoadBalancer(ctx, spec)
		_, _ = lbs.EnsureLoadBalancer(ctx, spec, nil)
		_ = lbs.UpdateLoadBalancerHosts(ctx, spec, nil)
		_ = lbs.EnsureLoadBalancerDeleted(ctx, spec)
		if l, ok := lbs.(cloud.LoadBalancerLister); ok {
			_, _ = l.ListLoadBalancers(ctx, "c")
		}
	}
	routes, _ := p.Routes()
	_, _ = routes.ListRoutes(ctx, "c")
	_ = routes.CreateRoute(ctx, "c", "h", cloud.Route{})
	_ = routes.DeleteRoute(ctx, "c", cloud.Route{})
	vols, _ := p.Volumes()
	_, _ = vols.VolumeTopology(ctx, &corev1.PersistentVolume{})
	creds, _ := p.RegistryCredentials()
	_, _ = creds.RegistryCredential(ctx, cloud.RegistryCredentialRequest{Image: "registry.example.com/a:1"})
}

func TestInstrumentProvider(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	raw := &metricsCloud{name: "My-Cloud.v2", err: errCloud, lister: true}
	p := instrumentProvider(raw, reg)
	if p.ProviderName() != "My-Cloud.v2" {
		t.Errorf("ProviderName: %q", p.ProviderName())
	}
	if got, want := cloud.Discover(p), cloud.Discover(raw); !reflect.DeepEqual(got, want) {
		t.Errorf("capabilities: %+v, want %+v", got, want)
	}
	lbs, _ := p.LoadBalancers()
	if _, ok := lbs.(cloud.LoadBalancerLister); !ok {
		t.Fatal("the wrapped load balancers lost LoadBalancerLister")
	}
	refs, err := lbs.(cloud.LoadBalancerLister).ListLoadBalancers(context.Background(), "c")
	if len(refs) != 1 || !errors.Is(err, errCloud) {
		t.Errorf("ListLoadBalancers through the wrapper: %v %v", refs, err)
	}
	callAll(t, p)

	const duration, errs = "cloudprovider_my_cloud_v2_api_request_duration_seconds", "cloudprovider_my_cloud_v2_api_request_errors"
	calls := map[string]float64{
		"instance_metadata": 1, "instance_exists": 1,
		"get_load_balancer": 1, "ensure_load_balancer": 1, "update_load_balancer_hosts": 1, "list_load_balancers": 2,
		"list_routes": 1, "create_route": 1, "delete_route": 1, "volume_topology": 1, "registry_credential": 1,
	}
	// instance_shutdown (ErrNotImplemented) and ensure_load_balancer_deleted
	// (ErrImplementedElsewhere) made no request: not recorded.
	if got := byRequest(t, reg, duration); !reflect.DeepEqual(got, calls) {
		t.Errorf("%s: %v, want %v", duration, got, calls)
	}
	if got := byRequest(t, reg, errs); !reflect.DeepEqual(got, calls) {
		t.Errorf("%s: %v, want %v", errs, got, calls)
	}

	// Successful calls are timed, not counted as errors; a second wrapper
	// on the same registry shares the collectors.
	ok := instrumentProvider(&metricsCloud{name: "My-Cloud.v2"}, reg)
	callAll(t, ok)
	if got := byRequest(t, reg, duration)["ensure_load_balancer"]; got != 2 {
		t.Errorf("ensure_load_balancer timed %v times, want 2", got)
	}
	if got := byRequest(t, reg, errs)["ensure_load_balancer"]; got != 1 {
		t.Errorf("ensure_load_balancer errors %v, want 1", got)
	}
}

func TestInstrumentProviderKeepsWhatIsNot(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p := instrumentProvider(&metricsCloud{name: "plain"}, reg)
	lbs, _ := p.LoadBalancers()
	if _, ok := lbs.(cloud.LoadBalancerLister); ok {
		t.Error("load balancers without LoadBalancerLister gained it")
	}
	p = instrumentProvider(&metricsCloud{name: "plain", noLBs: true}, reg)
	if lbs, ok := p.LoadBalancers(); ok || lbs != nil {
		t.Errorf("a provider without load balancers has some: %v %v", lbs, ok)
	}
	raw := &metricsCloud{name: "x"}
	if instrumentProvider(raw, nil) != cloud.Provider(raw) {
		t.Error("without a registry the provider is not returned as is")
	}
}

func TestMetricsProviderName(t *testing.T) {
	for in, want := range map[string]string{"aws": "aws", "local": "local", "My-Cloud.v2": "my_cloud_v2", "": "unknown"} {
		if got := metricsProviderName(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// addressingCloud's instances can look up addresses alone.
type addressingCloud struct{ metricsCloud }
type mcAddressingInstances struct{ mcInstances }

func (c *addressingCloud) Instances() (cloud.Instances, bool) { return mcAddressingInstances{}, true }
func (mcAddressingInstances) InstanceAddresses(context.Context, cloud.Node) ([]corev1.NodeAddress, error) {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}, nil
}

// The wrapper keeps InstanceAddresser (the node controller's cheap periodic
// sync) and times it; instances without it do not gain it.
func TestInstrumentProviderKeepsInstanceAddresser(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	inst, _ := instrumentProvider(&addressingCloud{metricsCloud{name: "addr"}}, reg).Instances()
	a, ok := inst.(cloud.InstanceAddresser)
	if !ok {
		t.Fatal("the wrapped instances lost InstanceAddresser")
	}
	if got, err := a.InstanceAddresses(context.Background(), cloud.Node{Name: "n"}); err != nil || len(got) != 1 {
		t.Fatalf("InstanceAddresses = %v, %v", got, err)
	}
	if got := byRequest(t, reg, "cloudprovider_addr_api_request_duration_seconds"); got["instance_addresses"] != 1 {
		t.Errorf("instance_addresses not timed: %v", got)
	}
	plain, _ := instrumentProvider(&metricsCloud{name: "plain2"}, reg).Instances()
	if _, ok := plain.(cloud.InstanceAddresser); ok {
		t.Error("instances without InstanceAddresser gained it")
	}
}
