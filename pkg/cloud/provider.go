package cloud

// Provider is implemented by a platform. Every method must be safe for
// concurrent use.
type Provider interface {
	// ProviderName is the name providerIDs start with ("<name>://...").
	ProviderName() string
	// Instances returns the instances capability; every provider that runs
	// nodes has it.
	Instances() (Instances, bool)
	// LoadBalancers returns the load-balancer capability, if any.
	LoadBalancers() (LoadBalancers, bool)
	// Routes returns the pod-network routes capability, if any.
	Routes() (Routes, bool)
	// Volumes returns the volume topology capability, if any.
	Volumes() (Volumes, bool)
	// RegistryCredentials returns the image registry credentials capability, if any.
	RegistryCredentials() (RegistryCredentials, bool)
}

// Capabilities summarises what a provider supports, for logs, `portside`
// status output and the conformance suite.
type Capabilities struct {
	Instances           bool                 `json:"instances"`
	LoadBalancers       bool                 `json:"loadBalancers"`
	LoadBalancerFeature LoadBalancerFeatures `json:"loadBalancerFeatures"`
	Routes              bool                 `json:"routes"`
	Volumes             bool                 `json:"volumes"`
	RegistryCredentials bool                 `json:"registryCredentials"`
}

// Discover reports the capabilities of p.
func Discover(p Provider) Capabilities {
	var c Capabilities
	_, c.Instances = p.Instances()
	var lbs LoadBalancers
	if lbs, c.LoadBalancers = p.LoadBalancers(); c.LoadBalancers {
		c.LoadBalancerFeature = lbs.Features()
	}
	_, c.Routes = p.Routes()
	_, c.Volumes = p.Volumes()
	_, c.RegistryCredentials = p.RegistryCredentials()
	return c
}
