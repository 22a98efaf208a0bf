// Package api holds the wire types of the local cloud's HTTP/JSON API,
// version v1, shared by its server and its Go client.
//
// All paths start with /v1 and need "Authorization: Bearer <token>".
// Errors are returned as an Error body with a 4xx or 5xx status.
package api

import "time"

// Version is the API version prefix.
const Version = "v1"

// Codes of Error that clients act on.
const (
	// CodeNotFound: the resource named does not exist.
	CodeNotFound = "NotFound"
	// CodeNoSuchEndpoint: the server has no endpoint at that method and
	// path (another version, a wrong endpoint): not the resource's absence.
	CodeNoSuchEndpoint = "NoSuchEndpoint"
	// CodeInvalid: the request is malformed or a field's value is wrong
	// (400); the message says which.
	CodeInvalid = "Invalid"
)

// Error is the body of every non-2xx response.
type Error struct {
	// Code is a stable, machine-readable reason: Unauthorized, NotFound,
	// NoSuchEndpoint (404: no API endpoint at that method and path, which
	// says nothing about any resource), AlreadyExists, Invalid, TooLarge,
	// Throttled, InjectedFault, Internal, LimitExceeded (422: the cloud
	// holds as many objects of a kind as its limit allows).
	Code string `json:"code"`
	// Message says what is wrong and what to do.
	Message string `json:"message"`
}

// Region is a region and its zones.
type Region struct {
	Name  string   `json:"name"`
	Zones []string `json:"zones"`
}

// InstanceType is a machine shape.
type InstanceType struct {
	Name     string `json:"name"`
	CPUs     int    `json:"cpus"`
	MemoryMB int    `json:"memoryMB"`
}

// Instance states.
const (
	InstanceRunning = "running"
	InstanceStopped = "stopped"
)

// Address types, as Kubernetes NodeAddress types.
const (
	AddressInternalIP  = "InternalIP"
	AddressExternalIP  = "ExternalIP"
	AddressHostname    = "Hostname"
	AddressInternalDNS = "InternalDNS"
)

// Address is one address of an instance.
type Address struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// Instance is a virtual machine.
type Instance struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Zone      string            `json:"zone"`
	Region    string            `json:"region"`
	Type      string            `json:"type"`
	State     string            `json:"state"`
	Addresses []Address         `json:"addresses"`
	Labels    map[string]string `json:"labels,omitempty"`
	// PodCIDRs the cloud assigned to the instance (CloudAllocator).
	PodCIDRs  []string  `json:"podCIDRs,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateInstanceRequest creates an instance. Addresses are allocated from
// the cloud's node pools: one IPv4, and one IPv6 when IPv6 is true.
type CreateInstanceRequest struct {
	Name   string            `json:"name"`
	Zone   string            `json:"zone"`
	Type   string            `json:"type,omitempty"`
	IPv4   *bool             `json:"ipv4,omitempty"` // default true
	IPv6   bool              `json:"ipv6,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// PodCIDRs assigns pod CIDRs to the instance (at most one per family),
	// for CCMs run with --cidr-allocator-type=CloudAllocator.
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// UserData boots the instance as a real machine (a cloud run with
	// --machines=real): a machine boot configuration (JSON), completed by
	// the cloud with the instance's name, address and disk. It is kept by
	// the cloud and never returned (it holds credentials).
	UserData string `json:"userData,omitempty"`
}

// Protocols of load-balancer listeners.
const (
	ProtocolTCP = "TCP"
	ProtocolUDP = "UDP"
)

// Listener is one port of a load balancer.
type Listener struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol"`
	// Port on the VIP.
	Port int `json:"port"`
	// BackendPort is where backends receive the traffic (the NodePort).
	BackendPort int `json:"backendPort"`
}

// Backend is a target of a load balancer.
type Backend struct {
	// Name is the node's name: shown, and matched by a removal that names
	// it (ChangeBackendsRequest).
	Name string `json:"name"`
	// Address is the IP traffic is forwarded to.
	Address string `json:"address"`
}

// HealthCheck types.
const (
	HealthCheckTCP  = "tcp"
	HealthCheckHTTP = "http"
)

// HealthCheck says how backends are checked. With Type http, GET Path on
// Port must answer 200; with Type tcp, a connection to each listener's
// BackendPort must succeed.
type HealthCheck struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
	Port int    `json:"port,omitempty"`
}

// LoadBalancerSpec is what a client asks for.
type LoadBalancerSpec struct {
	// Cluster tags the load balancer with the cluster that owns it.
	Cluster   string            `json:"cluster"`
	Tags      map[string]string `json:"tags,omitempty"`
	Listeners []Listener        `json:"listeners"`
	Backends  []Backend         `json:"backends"`
	// SourceRanges limit clients; empty allows everyone.
	SourceRanges []string     `json:"sourceRanges,omitempty"`
	HealthCheck  *HealthCheck `json:"healthCheck,omitempty"`
	// IPFamilies: "IPv4", "IPv6"; default IPv4.
	IPFamilies []string `json:"ipFamilies,omitempty"`
	// RequestedIP asks for a specific VIP from the pool.
	RequestedIP string `json:"requestedIP,omitempty"`
	// ClientIPAffinity sends a client to the same backend while it is healthy.
	ClientIPAffinity bool `json:"clientIPAffinity,omitempty"`
	// DataPath is how a cloud with real machines carries the flows of a
	// load balancer with backend ports: DataPathKernel ("" too) by the VPC
	// router's kernel (address rewriting, no proxy: the fastest), or
	// DataPathProxy by the data plane's proxy alone (its connection caps
	// and per-connection counts apply to every flow). Elsewhere the proxy
	// serves either way.
	DataPath string `json:"dataPath,omitempty"`
}

// Data paths of a load balancer (LoadBalancerSpec.DataPath).
const (
	DataPathKernel = "kernel"
	DataPathProxy  = "proxy"
)

// Load balancer states.
const (
	LoadBalancerActive = "active"
	LoadBalancerError  = "error"
)

// LoadBalancer is a load balancer with its allocated VIPs.
type LoadBalancer struct {
	Name string `json:"name"`
	LoadBalancerSpec
	VIPs      []string  `json:"vips"`
	State     string    `json:"state"`
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// BackendHealth is the data plane's view of one backend.
type BackendHealth struct {
	Name        string    `json:"name"`
	Address     string    `json:"address"`
	Healthy     bool      `json:"healthy"`
	Draining    bool      `json:"draining,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	LastChecked time.Time `json:"lastChecked,omitempty"`
	ActiveConns int64     `json:"activeConns"`
}

// ListenerHealth is the data plane's view of one listener (VIP × port).
type ListenerHealth struct {
	Protocol string `json:"protocol"`
	// Address is VIP:port.
	Address string `json:"address"`
	// Serving is false while the listener backs off after accept (or UDP
	// read) errors such as EMFILE; the next success makes it true again.
	Serving      bool   `json:"serving"`
	AcceptErrors int64  `json:"acceptErrors,omitempty"`
	LastError    string `json:"lastError,omitempty"`
	// Active is the number of open TCP connections or UDP flows.
	Active int64 `json:"active"`
	// Rejected counts TCP connections closed and UDP datagrams dropped
	// because a connection or flow cap was reached.
	Rejected int64 `json:"rejected,omitempty"`
	// Kernel is true when the VPC router forwards this listener's new
	// flows to the backends itself (the kernel path: address rewriting in
	// the router, no proxy); Active then counts only the connections the
	// proxy still serves (clients the kernel path leaves to it).
	Kernel bool `json:"kernel,omitempty"`
	// KernelError is why the kernel path is not in use (the proxy serves
	// meanwhile; retried with backoff).
	KernelError string `json:"kernelError,omitempty"`
}

// LoadBalancerHealth is the health of a load balancer's backends.
type LoadBalancerHealth struct {
	Name string `json:"name"`
	// Serving is true when the load balancer has listeners and all of them
	// serve.
	Serving   bool             `json:"serving"`
	Backends  []BackendHealth  `json:"backends"`
	Listeners []ListenerHealth `json:"listeners,omitempty"`
}

// SetBackendsRequest replaces only the backends of a load balancer.
type SetBackendsRequest struct {
	Backends []Backend `json:"backends"`
}

// ChangeBackendsRequest removes, then adds, backends of a load balancer
// (PATCH /v1/load-balancers/{name}/backends), leaving the others alone:
// a node joining or leaving is one small change per load balancer.
// Backends are identified by address; adding one it has only renames it,
// removing one it lacks is not an error. A removal with a Name removes the
// backend only while it still has that name: when a new node is given a
// deleted node's address and added first, the deleted node's removal
// leaves the new node's backend alone. A removal without a Name, or of a
// backend stored without one, removes by address alone.
type ChangeBackendsRequest struct {
	Add    []Backend `json:"add,omitempty"`
	Remove []Backend `json:"remove,omitempty"`
}

// ChangeBackendsResponse says how many backends the load balancer has now.
type ChangeBackendsResponse struct {
	Name     string `json:"name"`
	Backends int    `json:"backends"`
}

// Route sends a destination CIDR to an instance.
type Route struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	// ClusterUID tells clusters of the same name apart (optional).
	ClusterUID      string    `json:"clusterUID,omitempty"`
	TargetNode      string    `json:"targetNode"`
	TargetInstance  string    `json:"targetInstance,omitempty"`
	DestinationCIDR string    `json:"destinationCIDR"`
	Blackhole       bool      `json:"blackhole"`
	CreatedAt       time.Time `json:"createdAt"`
}

// Volume is a disk in one or more zones.
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Zones     []string  `json:"zones"`
	Region    string    `json:"region"`
	SizeGiB   int       `json:"sizeGiB"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateVolumeRequest creates a volume.
type CreateVolumeRequest struct {
	Name    string   `json:"name"`
	Zones   []string `json:"zones"`
	SizeGiB int      `json:"sizeGiB"`
}

// Registry is an image registry the cloud issues credentials for.
type Registry struct {
	Host      string    `json:"host"`
	CreatedAt time.Time `json:"createdAt"`
	// Served is true for the registry the local cloud itself serves (an OCI
	// distribution registry on Host); other registries are hosts the cloud
	// only issues credentials for.
	Served bool `json:"served,omitempty"`
}

// CredentialRequest asks for a registry credential for an image.
type CredentialRequest struct {
	Image string `json:"image"`
	// ServiceAccountToken, when set, is exchanged: the cloud verifies it
	// against a trusted issuer (see TokenIssuer) and binds the credential to
	// that service account. The kubelet sends it in service-account-token mode.
	ServiceAccountToken string `json:"serviceAccountToken,omitempty"`
	// ServiceAccountAnnotations are the annotations the kubelet passes along
	// with the token (tokenAttributes in the kubelet's config).
	ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations,omitempty"`
	// Push asks for a credential that may also push to the served registry.
	Push bool `json:"push,omitempty"`
}

// Credential is a short-lived registry credential, signed by the cloud.
type Credential struct {
	Registry  string    `json:"registry"`
	Username  string    `json:"username"`
	Password  string    `json:"password"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Subject is who the credential was issued to:
	// "system:serviceaccount:<namespace>:<name>" for an exchanged token, else
	// "node".
	Subject string `json:"subject,omitempty"`
	// Push is true when the credential may push.
	Push bool `json:"push,omitempty"`
	// Repositories are the only repositories the credential reads (names,
	// or prefixes ending in "/"); empty: every repository.
	Repositories []string `json:"repositories,omitempty"`
}

// TokenIssuer is a service-account token issuer the cloud trusts when it
// exchanges tokens for registry credentials (a cluster's kube-apiserver:
// its --service-account-issuer and the public half of its
// --service-account-signing-key-file).
type TokenIssuer struct {
	// Issuer is the token's "iss" claim, e.g. "https://kubernetes.default.svc".
	Issuer string `json:"issuer"`
	// Audiences lists the "aud" values accepted; one must be in the token.
	Audiences []string `json:"audiences"`
	// PublicKeysPEM holds one or more PEM public keys (RSA or ECDSA) that
	// verify the tokens' signatures.
	PublicKeysPEM string `json:"publicKeysPEM"`
	// Repositories narrows what credentials exchanged for this issuer's
	// tokens read: repository names, or prefixes ending in "/", where
	// {namespace} and {serviceAccount} stand for the token's service
	// account, e.g. "{namespace}/" or "shared/base". Empty: every
	// repository of the registry, as a node's credential reads.
	Repositories []string  `json:"repositories,omitempty"`
	CreatedAt    time.Time `json:"createdAt,omitempty"`
}

// FaultRule injects failures into requests matching Method and Path.
type FaultRule struct {
	// Method is an HTTP method or "*".
	Method string `json:"method"`
	// PathPrefix selects requests, e.g. "/v1/load-balancers"; "" matches all.
	PathPrefix string `json:"pathPrefix,omitempty"`
	// ErrorRate in [0,1]: answer 500 InjectedFault.
	ErrorRate float64 `json:"errorRate,omitempty"`
	// ThrottleRate in [0,1]: answer 429 with Retry-After.
	ThrottleRate      float64 `json:"throttleRate,omitempty"`
	RetryAfterSeconds int     `json:"retryAfterSeconds,omitempty"`
	// LatencyMillis delays matching requests.
	LatencyMillis int `json:"latencyMillis,omitempty"`
}

// Faults is the set of fault rules in force.
type Faults struct {
	Rules []FaultRule `json:"rules"`
}
