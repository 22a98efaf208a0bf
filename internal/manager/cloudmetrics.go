package manager

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// cloudAPIBuckets hold every bucket bound of the in-tree providers'
// cloudprovider_<provider>_api_request_duration_seconds: AWS's and GCE's
// (Prometheus' defaults, 5 ms to 10 s) and Azure's (100 ms to 20 min, for
// load balancer operations that take minutes), so that a dashboard written
// for any of them finds its le values.
var cloudAPIBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600, 1200}

// apiMetrics are the in-tree cloud providers' API metrics, named for the
// provider: cloudprovider_<provider>_api_request_duration_seconds{request}
// and cloudprovider_<provider>_api_request_errors{request}, request being
// the Portside method called, in snake case ("ensure_load_balancer").
type apiMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// observe records a call to the cloud started at start. A provider's
// ErrNotImplemented or ErrImplementedElsewhere is no request to its cloud,
// and is not recorded; every other error is counted.
func (m *apiMetrics) observe(request string, start time.Time, err error) {
	if errors.Is(err, cloud.ErrNotImplemented) || errors.Is(err, cloud.ErrImplementedElsewhere) {
		return
	}
	m.duration.WithLabelValues(request).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(request).Inc()
	}
}

// metricsProviderName turns a provider name into a metric name part:
// lower case, every character but [a-z0-9_] an underscore.
func metricsProviderName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

// registerOrExisting registers c on reg, or returns the collector already
// registered under its name (a second instrumentProvider on one registry).
func registerOrExisting[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// instrumentProvider wraps p so that every call to its cloud is timed in
// cloudprovider_<provider>_api_request_duration_seconds{request} and every
// failure counted in cloudprovider_<provider>_api_request_errors{request},
// registered on reg, as the in-tree providers (aws, gce, azure) exported
// them. Capabilities keep their optional interfaces (LoadBalancerLister).
// With a nil reg, p is returned as is.
func instrumentProvider(p cloud.Provider, reg prometheus.Registerer) cloud.Provider {
	if p == nil || reg == nil {
		return p
	}
	return &instrumentedProvider{Provider: p, m: newAPIMetrics(reg, p.ProviderName())}
}

// RegisterCloudAPIMetrics registers on reg the cloud API metrics that
// instrumentProvider registers for a provider named providerName (for
// docs/reference/metrics.md).
func RegisterCloudAPIMetrics(reg prometheus.Registerer, providerName string) {
	newAPIMetrics(reg, providerName)
}

// newAPIMetrics returns the cloud API metrics of the provider named
// providerName, registered on reg (or the ones registered already).
func newAPIMetrics(reg prometheus.Registerer, providerName string) *apiMetrics {
	prefix := "cloudprovider_" + metricsProviderName(providerName)
	return &apiMetrics{
		duration: registerOrExisting(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "_api_request_duration_seconds",
			Help:    "Latency of a cloud API call, by request (the Portside cloud provider method).",
			Buckets: cloudAPIBuckets,
		}, []string{"request"})),
		errors: registerOrExisting(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_api_request_errors",
			Help: "Number of errors for a cloud API call, by request (the Portside cloud provider method).",
		}, []string{"request"})),
	}
}

type instrumentedProvider struct {
	cloud.Provider
	m *apiMetrics
}

func (p *instrumentedProvider) Instances() (cloud.Instances, bool) {
	i, ok := p.Provider.Instances()
	if !ok || i == nil {
		return i, ok
	}
	wrapped := &instrumentedInstances{i: i, m: p.m}
	if a, isAddresser := i.(cloud.InstanceAddresser); isAddresser {
		return &instrumentedAddressingInstances{wrapped, a}, true
	}
	return wrapped, true
}

// instrumentedAddressingInstances keeps the optional InstanceAddresser,
// which the node controller's periodic address sync asserts.
type instrumentedAddressingInstances struct {
	*instrumentedInstances
	addresser cloud.InstanceAddresser
}

func (w *instrumentedAddressingInstances) InstanceAddresses(ctx context.Context, node cloud.Node) ([]corev1.NodeAddress, error) {
	start := time.Now()
	addrs, err := w.addresser.InstanceAddresses(ctx, node)
	w.m.observe("instance_addresses", start, err)
	return addrs, err
}

func (p *instrumentedProvider) LoadBalancers() (cloud.LoadBalancers, bool) {
	lbs, ok := p.Provider.LoadBalancers()
	if !ok || lbs == nil {
		return lbs, ok
	}
	wrapped := &instrumentedLoadBalancers{lb: lbs, m: p.m}
	lister, isLister := lbs.(cloud.LoadBalancerLister)
	changer, isChanger := lbs.(cloud.LoadBalancerHostChanger)
	switch {
	case isLister && isChanger:
		return &instrumentedListingChangingLoadBalancers{&instrumentedListingLoadBalancers{wrapped, lister}, instrumentedHostChanger{changer, p.m}}, true
	case isLister:
		return &instrumentedListingLoadBalancers{wrapped, lister}, true
	case isChanger:
		return &instrumentedChangingLoadBalancers{wrapped, instrumentedHostChanger{changer, p.m}}, true
	}
	return wrapped, true
}

func (p *instrumentedProvider) Routes() (cloud.Routes, bool) {
	r, ok := p.Provider.Routes()
	if !ok || r == nil {
		return r, ok
	}
	return &instrumentedRoutes{r: r, m: p.m}, true
}

func (p *instrumentedProvider) Volumes() (cloud.Volumes, bool) {
	v, ok := p.Provider.Volumes()
	if !ok || v == nil {
		return v, ok
	}
	return &instrumentedVolumes{v: v, m: p.m}, true
}

func (p *instrumentedProvider) RegistryCredentials() (cloud.RegistryCredentials, bool) {
	rc, ok := p.Provider.RegistryCredentials()
	if !ok || rc == nil {
		return rc, ok
	}
	return &instrumentedCredentials{rc: rc, m: p.m}, true
}

type instrumentedInstances struct {
	i cloud.Instances
	m *apiMetrics
}

func (w *instrumentedInstances) InstanceMetadata(ctx context.Context, node cloud.Node) (*cloud.InstanceMetadata, error) {
	start := time.Now()
	md, err := w.i.InstanceMetadata(ctx, node)
	w.m.observe("instance_metadata", start, err)
	return md, err
}

func (w *instrumentedInstances) InstanceExists(ctx context.Context, node cloud.Node) (bool, error) {
	start := time.Now()
	exists, err := w.i.InstanceExists(ctx, node)
	w.m.observe("instance_exists", start, err)
	return exists, err
}

func (w *instrumentedInstances) InstanceShutdown(ctx context.Context, node cloud.Node) (bool, error) {
	start := time.Now()
	shutdown, err := w.i.InstanceShutdown(ctx, node)
	w.m.observe("instance_shutdown", start, err)
	return shutdown, err
}

type instrumentedLoadBalancers struct {
	lb cloud.LoadBalancers
	m  *apiMetrics
}

// Features is a declaration, not a call to the cloud: not recorded.
func (w *instrumentedLoadBalancers) Features() cloud.LoadBalancerFeatures { return w.lb.Features() }

func (w *instrumentedLoadBalancers) GetLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec) (*corev1.LoadBalancerStatus, bool, error) {
	start := time.Now()
	st, exists, err := w.lb.GetLoadBalancer(ctx, spec)
	w.m.observe("get_load_balancer", start, err)
	return st, exists, err
}

func (w *instrumentedLoadBalancers) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	start := time.Now()
	st, err := w.lb.EnsureLoadBalancer(ctx, spec, hosts)
	w.m.observe("ensure_load_balancer", start, err)
	return st, err
}

func (w *instrumentedLoadBalancers) UpdateLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	start := time.Now()
	err := w.lb.UpdateLoadBalancerHosts(ctx, spec, hosts)
	w.m.observe("update_load_balancer_hosts", start, err)
	return err
}

func (w *instrumentedLoadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, spec *cloud.LoadBalancerSpec) error {
	start := time.Now()
	err := w.lb.EnsureLoadBalancerDeleted(ctx, spec)
	w.m.observe("ensure_load_balancer_deleted", start, err)
	return err
}

// instrumentedListingLoadBalancers keeps the optional LoadBalancerLister
// of a provider's load balancers, which the service controller's orphan
// collection asserts.
type instrumentedListingLoadBalancers struct {
	*instrumentedLoadBalancers
	lister cloud.LoadBalancerLister
}

func (w *instrumentedListingLoadBalancers) ListLoadBalancers(ctx context.Context, cluster string) ([]cloud.LoadBalancerRef, error) {
	start := time.Now()
	refs, err := w.lister.ListLoadBalancers(ctx, cluster)
	w.m.observe("list_load_balancers", start, err)
	return refs, err
}

// instrumentedHostChanger keeps the optional LoadBalancerHostChanger, which
// the service controller asserts to send host changes incrementally.
type instrumentedHostChanger struct {
	changer cloud.LoadBalancerHostChanger
	m       *apiMetrics
}

func (w instrumentedHostChanger) ChangeLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, add, remove []cloud.Host) error {
	start := time.Now()
	err := w.changer.ChangeLoadBalancerHosts(ctx, spec, add, remove)
	w.m.observe("change_load_balancer_hosts", start, err)
	return err
}

type instrumentedChangingLoadBalancers struct {
	*instrumentedLoadBalancers
	instrumentedHostChanger
}

type instrumentedListingChangingLoadBalancers struct {
	*instrumentedListingLoadBalancers
	instrumentedHostChanger
}

type instrumentedRoutes struct {
	r cloud.Routes
	m *apiMetrics
}

func (w *instrumentedRoutes) ListRoutes(ctx context.Context, cluster string) ([]cloud.Route, error) {
	start := time.Now()
	routes, err := w.r.ListRoutes(ctx, cluster)
	w.m.observe("list_routes", start, err)
	return routes, err
}

func (w *instrumentedRoutes) CreateRoute(ctx context.Context, cluster, nameHint string, route cloud.Route) error {
	start := time.Now()
	err := w.r.CreateRoute(ctx, cluster, nameHint, route)
	w.m.observe("create_route", start, err)
	return err
}

func (w *instrumentedRoutes) DeleteRoute(ctx context.Context, cluster string, route cloud.Route) error {
	start := time.Now()
	err := w.r.DeleteRoute(ctx, cluster, route)
	w.m.observe("delete_route", start, err)
	return err
}

type instrumentedVolumes struct {
	v cloud.Volumes
	m *apiMetrics
}

func (w *instrumentedVolumes) VolumeTopology(ctx context.Context, pv *corev1.PersistentVolume) (*cloud.VolumeTopology, error) {
	start := time.Now()
	t, err := w.v.VolumeTopology(ctx, pv)
	w.m.observe("volume_topology", start, err)
	return t, err
}

type instrumentedCredentials struct {
	rc cloud.RegistryCredentials
	m  *apiMetrics
}

func (w *instrumentedCredentials) RegistryCredential(ctx context.Context, req cloud.RegistryCredentialRequest) (*cloud.RegistryCredential, error) {
	start := time.Now()
	c, err := w.rc.RegistryCredential(ctx, req)
	w.m.observe("registry_credential", start, err)
	return c, err
}

var (
	_ cloud.Provider                = (*instrumentedProvider)(nil)
	_ cloud.Instances               = (*instrumentedInstances)(nil)
	_ cloud.LoadBalancers           = (*instrumentedLoadBalancers)(nil)
	_ cloud.LoadBalancers           = (*instrumentedListingLoadBalancers)(nil)
	_ cloud.LoadBalancerLister      = (*instrumentedListingLoadBalancers)(nil)
	_ cloud.LoadBalancerHostChanger = (*instrumentedChangingLoadBalancers)(nil)
	_ cloud.LoadBalancerLister      = (*instrumentedListingChangingLoadBalancers)(nil)
	_ cloud.LoadBalancerHostChanger = (*instrumentedListingChangingLoadBalancers)(nil)
	_ cloud.InstanceAddresser       = (*instrumentedAddressingInstances)(nil)
	_ cloud.Routes                  = (*instrumentedRoutes)(nil)
	_ cloud.Volumes                 = (*instrumentedVolumes)(nil)
	_ cloud.RegistryCredentials     = (*instrumentedCredentials)(nil)
)
