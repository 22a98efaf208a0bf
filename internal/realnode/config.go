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
	"net/netip"
	"os"
	"path/filepath"
)

// BootConfig is a machine's user data: everything its init needs.
type BootConfig struct {
	// NodeName is the Node's name (the instance's name); NodeIP its VPC
	// address.
	NodeName string `json:"nodeName"`
	NodeIP   string `json:"nodeIP"`
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
	if _, err := netip.ParsePrefix(c.ClusterCIDR); c.ClusterCIDR != "" && err != nil {
		errs = append(errs, fmt.Errorf("clusterCIDR %q: %v", c.ClusterCIDR, err))
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
