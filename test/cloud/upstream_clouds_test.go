package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// Two small providers written the way upstream providers are, for the
// parity tests: the same provider is driven once by upstream's own
// controllers and once through upstream.FromUpstream the way Portside's
// controllers call the SDK, and what it was asked must be the same.

// machine is one instance of the test clouds.
type machine struct {
	id, instanceType, zone, region string
	addresses                      []corev1.NodeAddress
	labels                         map[string]string
	shutdown                       bool
}

// call is one call a test cloud received, with deep copies of its arguments
// as the provider saw them.
type call struct {
	Method  string
	Cluster string
	Key     string // providerID, node name or route name hint
	Node    *corev1.Node
	Service *corev1.Service
	Nodes   []*corev1.Node
	Route   *cloudprovider.Route
}

type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) record(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Node != nil {
		c.Node = c.Node.DeepCopy()
	}
	if c.Service != nil {
		c.Service = c.Service.DeepCopy()
	}
	for i, n := range c.Nodes {
		c.Nodes[i] = n.DeepCopy()
	}
	if c.Route != nil {
		rt := *c.Route
		c.Route = &rt
	}
	r.calls = append(r.calls, c)
}

func (r *recorder) Calls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// machines is the inventory both test clouds share.
type machines map[string]machine // by node name

func (ms machines) byName(name string) (machine, error) {
	if m, ok := ms[name]; ok {
		return m, nil
	}
	return machine{}, cloudprovider.InstanceNotFound
}

func (ms machines) byProviderID(provider, pid string) (machine, error) {
	id, ok := strings.CutPrefix(pid, provider+"://")
	if !ok || id == "" {
		return machine{}, fmt.Errorf("providerID %q is not %s://<id>", pid, provider)
	}
	for _, m := range ms {
		if m.id == id {
			return m, nil
		}
	}
	return machine{}, cloudprovider.InstanceNotFound
}

// v2Cloud is written as current providers are: InstancesV2 only (each call
// gets the Node), a LoadBalancer and Routes.
type v2Cloud struct {
	recorder
	machines machines

	mu     sync.Mutex
	routes map[string]cloudprovider.Route
}

func newV2Cloud(ms machines) *v2Cloud {
	return &v2Cloud{machines: ms, routes: map[string]cloudprovider.Route{}}
}

var (
	_ cloudprovider.Interface    = (*v2Cloud)(nil)
	_ cloudprovider.InstancesV2  = (*v2Cloud)(nil)
	_ cloudprovider.LoadBalancer = (*v2Cloud)(nil)
	_ cloudprovider.Routes       = (*v2Cloud)(nil)
)

func (c *v2Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *v2Cloud) ProviderName() string                                              { return "v2" }
func (c *v2Cloud) HasClusterID() bool                                                { return true }
func (c *v2Cloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (c *v2Cloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return c, true }
func (c *v2Cloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (c *v2Cloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (c *v2Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return c, true }
func (c *v2Cloud) Routes() (cloudprovider.Routes, bool)                              { return c, true }

func (c *v2Cloud) lookup(node *corev1.Node) (machine, error) {
	if node.Spec.ProviderID != "" {
		return c.machines.byProviderID(c.ProviderName(), node.Spec.ProviderID)
	}
	return c.machines.byName(node.Name)
}

func (c *v2Cloud) InstanceExists(_ context.Context, node *corev1.Node) (bool, error) {
	c.record(call{Method: "InstanceExists", Node: node})
	_, err := c.lookup(node)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (c *v2Cloud) InstanceShutdown(_ context.Context, node *corev1.Node) (bool, error) {
	c.record(call{Method: "InstanceShutdown", Node: node})
	m, err := c.lookup(node)
	return m.shutdown, err
}

func (c *v2Cloud) InstanceMetadata(_ context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	c.record(call{Method: "InstanceMetadata", Node: node})
	m, err := c.lookup(node)
	if err != nil {
		return nil, err
	}
	return &cloudprovider.InstanceMetadata{ProviderID: c.ProviderName() + "://" + m.id, InstanceType: m.instanceType,
		NodeAddresses: m.addresses, Zone: m.zone, Region: m.region, AdditionalLabels: m.labels}, nil
}

func (c *v2Cloud) GetLoadBalancer(_ context.Context, cluster string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	c.record(call{Method: "GetLoadBalancer", Cluster: cluster, Service: svc})
	return &corev1.LoadBalancerStatus{}, false, nil
}

func (c *v2Cloud) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

func (c *v2Cloud) EnsureLoadBalancer(_ context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	c.record(call{Method: "EnsureLoadBalancer", Cluster: cluster, Service: svc, Nodes: append([]*corev1.Node(nil), nodes...)})
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.80"}}}, nil
}

func (c *v2Cloud) UpdateLoadBalancer(_ context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) error {
	c.record(call{Method: "UpdateLoadBalancer", Cluster: cluster, Service: svc, Nodes: append([]*corev1.Node(nil), nodes...)})
	return nil
}

func (c *v2Cloud) EnsureLoadBalancerDeleted(_ context.Context, cluster string, svc *corev1.Service) error {
	c.record(call{Method: "EnsureLoadBalancerDeleted", Cluster: cluster, Service: svc})
	return nil
}

func (c *v2Cloud) ListRoutes(_ context.Context, cluster string) ([]*cloudprovider.Route, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*cloudprovider.Route
	for _, rt := range c.routes {
		out = append(out, &rt)
	}
	return out, nil
}

// CreateRoute names the route after the hint and the CIDR: the hint is the
// node's UID, the same for both families of a dual-stack node.
func (c *v2Cloud) CreateRoute(_ context.Context, cluster, nameHint string, rt *cloudprovider.Route) error {
	c.record(call{Method: "CreateRoute", Cluster: cluster, Key: nameHint, Route: rt})
	c.mu.Lock()
	defer c.mu.Unlock()
	stored := *rt
	stored.Name = nameHint + "-" + strings.NewReplacer("/", "-", ":", "-").Replace(rt.DestinationCIDR)
	c.routes[stored.Name] = stored
	return nil
}

func (c *v2Cloud) DeleteRoute(_ context.Context, cluster string, rt *cloudprovider.Route) error {
	c.record(call{Method: "DeleteRoute", Cluster: cluster, Route: rt})
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.routes, rt.Name)
	return nil
}

// legacyCloud is written as older providers are: Instances and Zones, no
// InstancesV2; each lookup by providerID and by node name, and InstanceID
// gives the ID upstream turns into "<provider>://<id>".
type legacyCloud struct {
	recorder
	machines machines
	// noZones: Zones() is false.
	noZones bool
	// byNameOnly: InstanceID and every *ByProviderID lookup are
	// NotImplemented, as in providers that only know machines by name.
	byNameOnly bool
}

var (
	_ cloudprovider.Interface = (*legacyCloud)(nil)
	_ cloudprovider.Instances = (*legacyCloud)(nil)
	_ cloudprovider.Zones     = (*legacyCloud)(nil)
)

func (c *legacyCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *legacyCloud) ProviderName() string                                              { return "legacy" }
func (c *legacyCloud) HasClusterID() bool                                                { return true }
func (c *legacyCloud) Instances() (cloudprovider.Instances, bool)                        { return c, true }
func (c *legacyCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (c *legacyCloud) Zones() (cloudprovider.Zones, bool)                                { return c, !c.noZones }
func (c *legacyCloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (c *legacyCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return nil, false }
func (c *legacyCloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }

func (c *legacyCloud) byPID(method, pid string) (machine, error) {
	c.record(call{Method: method, Key: pid})
	if c.byNameOnly {
		return machine{}, cloudprovider.NotImplemented
	}
	return c.machines.byProviderID(c.ProviderName(), pid)
}

func (c *legacyCloud) byName(method string, name types.NodeName) (machine, error) {
	c.record(call{Method: method, Key: string(name)})
	return c.machines.byName(string(name))
}

func (c *legacyCloud) NodeAddresses(_ context.Context, name types.NodeName) ([]corev1.NodeAddress, error) {
	m, err := c.byName("NodeAddresses", name)
	return m.addresses, err
}

func (c *legacyCloud) NodeAddressesByProviderID(_ context.Context, pid string) ([]corev1.NodeAddress, error) {
	m, err := c.byPID("NodeAddressesByProviderID", pid)
	return m.addresses, err
}

func (c *legacyCloud) InstanceID(_ context.Context, name types.NodeName) (string, error) {
	if c.byNameOnly {
		c.record(call{Method: "InstanceID", Key: string(name)})
		return "", cloudprovider.NotImplemented
	}
	m, err := c.byName("InstanceID", name)
	return m.id, err
}

func (c *legacyCloud) InstanceType(_ context.Context, name types.NodeName) (string, error) {
	m, err := c.byName("InstanceType", name)
	return m.instanceType, err
}

func (c *legacyCloud) InstanceTypeByProviderID(_ context.Context, pid string) (string, error) {
	m, err := c.byPID("InstanceTypeByProviderID", pid)
	return m.instanceType, err
}

func (c *legacyCloud) AddSSHKeyToAllInstances(context.Context, string, []byte) error {
	return cloudprovider.NotImplemented
}

func (c *legacyCloud) CurrentNodeName(_ context.Context, hostname string) (types.NodeName, error) {
	return types.NodeName(hostname), nil
}

func (c *legacyCloud) InstanceExistsByProviderID(_ context.Context, pid string) (bool, error) {
	_, err := c.byPID("InstanceExistsByProviderID", pid)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (c *legacyCloud) InstanceShutdownByProviderID(_ context.Context, pid string) (bool, error) {
	m, err := c.byPID("InstanceShutdownByProviderID", pid)
	return m.shutdown, err
}

func (c *legacyCloud) GetZone(context.Context) (cloudprovider.Zone, error) {
	return cloudprovider.Zone{}, cloudprovider.NotImplemented
}

func (c *legacyCloud) GetZoneByProviderID(_ context.Context, pid string) (cloudprovider.Zone, error) {
	m, err := c.byPID("GetZoneByProviderID", pid)
	return cloudprovider.Zone{FailureDomain: m.zone, Region: m.region}, err
}

func (c *legacyCloud) GetZoneByNodeName(_ context.Context, name types.NodeName) (cloudprovider.Zone, error) {
	m, err := c.byName("GetZoneByNodeName", name)
	return cloudprovider.Zone{FailureDomain: m.zone, Region: m.region}, err
}
