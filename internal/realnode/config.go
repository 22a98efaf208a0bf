// Package realnode is what boots on a real machine of the local cloud: the
// configuration of containerd, kubelet and kube-proxy rendered from the
// machine's user data (BootConfig), and the machine's init, which runs
// inside the machine's namespaces, gives the daemons the machine's own
// /var/lib, /var/log, /run and /tmp, and supervises them as a machine's
// service manager would.
package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// BootConfig is a machine's user data: everything its init needs.
type BootConfig struct {
	// NodeName is the Node's name (the instance's name); NodeIP its VPC
	// address.
	NodeName string `json:"nodeName"`
	NodeIP   string `json:"nodeIP"`
	// NodeIP6 is its IPv6 VPC address in a dual-stack VPC ("" otherwise):
	// kubelet then reports both (--node-ip=<v4>,<v6>, which
	// --cloud-provider=external accepts since KEP-3705).
	NodeIP6 string `json:"nodeIP6,omitempty"`
	// IPv6Only: the cluster is IPv6 only on a dual-stack VPC (up
	// --ip-family=ipv6): ForCluster makes the IPv6 address the node's
	// only one, so kubelet, kube-proxy and the agent use IPv6 alone; the
	// machine keeps its IPv4 address to reach the gateway.
	IPv6Only bool `json:"ipv6Only,omitempty"`
	// Dir is the machine's own directory on the host ("its disk").
	Dir string `json:"dir"`
	// JoinCgroups are the cgroup.procs files the init writes its PID to
	// before anything else: the daemons are then in the machine's cgroups.
	JoinCgroups []string `json:"joinCgroups"`
	// CgroupRoot is kubelet's cgroupRoot: the machine's cgroup.
	CgroupRoot string `json:"cgroupRoot"`
	// Bin names the binaries (absolute paths on the host).
	Bin Binaries `json:"bin"`
	// APIServer is the URL the node reaches kube-apiserver at (the VPC
	// gateway); CAFile the cluster CA (PEM) inside Dir.
	APIServer string `json:"apiServer"`
	CAFile    string `json:"caFile"`
	// BootstrapToken is the TLS bootstrap token ("<id>.<secret>").
	BootstrapToken string `json:"bootstrapToken"`
	// ServingCertFile and ServingKeyFile are kubelet's serving certificate,
	// issued from the cluster CA for the instance's addresses.
	ServingCertFile string `json:"servingCertFile"`
	ServingKeyFile  string `json:"servingKeyFile"`
	// KubeProxyKubeconfig is kube-proxy's kubeconfig (system:kube-proxy).
	KubeProxyKubeconfig string `json:"kubeProxyKubeconfig"`
	// ClusterCIDR is the pods' range (kube-proxy); ClusterDNS the DNS
	// Service's address ("" for none); ClusterDomain its domain.
	ClusterCIDR   string `json:"clusterCIDR"`
	ClusterDNS    string `json:"clusterDNS,omitempty"`
	ClusterDomain string `json:"clusterDomain"`
	// Mirrors maps registry hosts (registry.k8s.io) to the cloud's registry
	// URL that serves them; RegistryCAFile verifies it.
	Mirrors        map[string]string `json:"mirrors,omitempty"`
	RegistryCAFile string            `json:"registryCAFile,omitempty"`
	// CredentialProviderConfig is kubelet's --image-credential-provider-
	// config ("" for none); its bin dir is Bin.CredentialProviderDir.
	CredentialProviderConfig string `json:"credentialProviderConfig,omitempty"`
	// SandboxImage is the pause image containerd pins.
	SandboxImage string `json:"sandboxImage"`
	// ProxyMode is kube-proxy's mode: nftables (default) or iptables.
	ProxyMode string `json:"proxyMode,omitempty"`
	// Verbosity is the daemons' -v.
	Verbosity int `json:"verbosity,omitempty"`
	// NodeLabels are kubelet's --node-labels (outside the kubernetes.io
	// namespaces, which NodeRestriction keeps from kubelets).
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	// ProxyAgent, when set, runs the network proxy's agent on the machine:
	// kube-apiserver's logs, exec, attach and port-forward then reach this
	// node's kubelet from inside the node, as konnectivity's DaemonSet does.
	ProxyAgent *ProxyAgent `json:"proxyAgent,omitempty"`
}

// ProxyAgent is a node's `portside proxy-agent`. Its ID and identifiers
// are not configured: the init derives them from NodeName and NodeIP, so
// they are always this node's (the server grants no other to a
// node-bound credential anyway).
type ProxyAgent struct {
	// Bin is the portside binary (host path), or with Upstream another
	// proxy-agent binary.
	Bin string `json:"bin"`
	// Upstream: Bin is upstream apiserver-network-proxy's proxy-agent
	// (`up --network-proxy-binaries`), run with upstream's flags only (no
	// subcommand, no --drain-timeout).
	Upstream bool `json:"upstream,omitempty"`
	// Server is host:port of the proxy server's agent port (the VPC
	// gateway).
	Server string `json:"server"`
	// CAFile verifies the server; CertFile and KeyFile are the node's
	// client certificate (CommonName system:node:<NodeName>).
	CAFile   string `json:"caFile"`
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// HealthPort serves /healthz, /readyz and /metrics on NodeIP (default
	// DefaultAgentHealthPort): the machine's own port, reached from the
	// host through the VPC.
	HealthPort int `json:"healthPort,omitempty"`
}

// DefaultAgentHealthPort is upstream konnectivity-agent's health port.
const DefaultAgentHealthPort = 8093

// validate names the agent section's first wrong fields.
func (a *ProxyAgent) validate() []error {
	var errs []error
	for name, p := range map[string]string{"proxyAgent.bin": a.Bin, "proxyAgent.caFile": a.CAFile,
		"proxyAgent.certFile": a.CertFile, "proxyAgent.keyFile": a.KeyFile} {
		if p == "" || !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", name, p))
		}
	}
	host, port, err := net.SplitHostPort(a.Server)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		errs = append(errs, fmt.Errorf("proxyAgent.server %q: want host:port of the proxy server's agent port", a.Server))
	}
	if a.HealthPort < 0 || a.HealthPort > 65535 {
		errs = append(errs, fmt.Errorf("proxyAgent.healthPort %d: want 1-65535 (0: %d)", a.HealthPort, DefaultAgentHealthPort))
	}
	return errs
}

// Binaries are the host paths of what a node runs.
type Binaries struct {
	Kubelet, KubeProxy, Containerd, Shim, Runc string
	// CNIDir holds the CNI plugins (ptp, host-local, loopback, portmap).
	CNIDir string
	// CredentialProviderDir holds portside-credential-provider.
	CredentialProviderDir string `json:",omitempty"`
}

// Validate checks the config, naming the first field that is wrong.
func (c *BootConfig) Validate() error {
	var errs []error
	need := func(name, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
		}
	}
	need("nodeName", c.NodeName)
	need("dir", c.Dir)
	need("cgroupRoot", c.CgroupRoot)
	need("apiServer", c.APIServer)
	need("caFile", c.CAFile)
	need("bootstrapToken", c.BootstrapToken)
	need("clusterCIDR", c.ClusterCIDR)
	need("sandboxImage", c.SandboxImage)
	if _, err := netip.ParseAddr(c.NodeIP); err != nil {
		errs = append(errs, fmt.Errorf("nodeIP %q: %v", c.NodeIP, err))
	}
	if c.IPv6Only {
		if a, err := netip.ParseAddr(c.NodeIP); err == nil && !a.Is6() {
			errs = append(errs, fmt.Errorf("ipv6Only: nodeIP %q is not an IPv6 address: the machine has none (its VPC is not dual-stack?)", c.NodeIP))
		}
	}
	if c.NodeIP6 != "" {
		if a, err := netip.ParseAddr(c.NodeIP6); err != nil || !a.Is6() || a.Is4In6() {
			errs = append(errs, fmt.Errorf("nodeIP6 %q: not an IPv6 address", c.NodeIP6))
		}
		if a, err := netip.ParseAddr(c.NodeIP); err == nil && !a.Is4() {
			errs = append(errs, fmt.Errorf("nodeIP %q with nodeIP6: the first must be the IPv4 address", c.NodeIP))
		}
	}
	if c.ClusterCIDR != "" {
		if err := checkDualCIDRs(c.ClusterCIDR); err != nil {
			errs = append(errs, fmt.Errorf("clusterCIDR %q: %v", c.ClusterCIDR, err))
		}
	}
	if c.ClusterDNS != "" {
		if _, err := netip.ParseAddr(c.ClusterDNS); err != nil {
			errs = append(errs, fmt.Errorf("clusterDNS %q: %v", c.ClusterDNS, err))
		}
	}
	switch c.ProxyMode {
	case "", "nftables", "iptables":
	default:
		errs = append(errs, fmt.Errorf("proxyMode %q: want nftables or iptables", c.ProxyMode))
	}
	for name, p := range map[string]string{"bin.kubelet": c.Bin.Kubelet, "bin.kubeProxy": c.Bin.KubeProxy,
		"bin.containerd": c.Bin.Containerd, "bin.shim": c.Bin.Shim, "bin.runc": c.Bin.Runc, "bin.cniDir": c.Bin.CNIDir} {
		if p == "" || !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", name, p))
		}
	}
	if c.ProxyAgent != nil {
		errs = append(errs, c.ProxyAgent.validate()...)
	}
	return errors.Join(errs...)
}

// Load reads a BootConfig file.
func Load(path string) (*BootConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c BootConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// Write saves the config (0600: it holds the bootstrap token).
func (c *BootConfig) Write(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// checkDualCIDRs checks a comma-separated list of CIDRs as Kubernetes
// takes them for dual-stack (--cluster-cidr, kube-proxy's clusterCIDR): one,
// or one of each family.
func checkDualCIDRs(list string) error {
	parts := strings.Split(list, ",")
	if len(parts) > 2 {
		return fmt.Errorf("at most two CIDRs, one per family")
	}
	var fams []bool
	for _, p := range parts {
		pr, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		fams = append(fams, pr.Addr().Is4())
	}
	if len(fams) == 2 && fams[0] == fams[1] {
		return fmt.Errorf("two CIDRs of one family: give one IPv4 and one IPv6")
	}
	return nil
}

// SetAddresses gives the config the machine's addresses (v6 invalid
// without one): an IPv6-only cluster's node has v6 alone as its NodeIP
// (without one, Validate refuses the IPv4 one, saying why).
func (c *BootConfig) SetAddresses(v4, v6 netip.Addr) {
	c.NodeIP, c.NodeIP6 = v4.String(), ""
	switch {
	case c.IPv6Only && v6.IsValid():
		c.NodeIP = v6.String()
	case v6.IsValid():
		c.NodeIP6 = v6.String()
	}
}
