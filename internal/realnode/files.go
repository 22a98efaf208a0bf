package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Paths inside the machine. /var/lib, /var/log and /run are the machine's
// own (its init binds directories of Dir over them), so the daemons keep
// their standard paths and nothing they write reaches the host's.
const (
	ContainerdSocket = "/run/containerd/containerd.sock"
	kubeletDir       = "/var/lib/kubelet"
)

// layout is where the init keeps what it renders, inside Dir.
type layout struct{ dir string }

func (l layout) etc(name string) string { return filepath.Join(l.dir, "etc", name) }
func (l layout) cniConfDir() string     { return filepath.Join(l.dir, "etc", "cni", "net.d") }
func (l layout) certsD() string         { return filepath.Join(l.dir, "etc", "containerd", "certs.d") }
func (l layout) log(name string) string { return filepath.Join(l.dir, "log", name) }

// Rebinds are the directories of Dir bound over the machine's standard
// paths, in order.
func (l layout) rebinds() [][2]string {
	return [][2]string{
		{filepath.Join(l.dir, "var-lib"), "/var/lib"},
		{filepath.Join(l.dir, "var-log"), "/var/log"},
		{filepath.Join(l.dir, "run"), "/run"},
	}
}

// hidden reports which of dirs the rebinds would hide from the daemons (a
// data directory or the tools under /var/lib, say), each once, outermost
// first: those are bound back inside the machine (mountMachinePaths).
func hidden(dirs []string) []string {
	var out []string
	sorted := append([]string(nil), dirs...)
	sort.Strings(sorted)
	for _, p := range sorted {
		for _, r := range []string{"/var/lib", "/var/log", "/run", "/var/run"} {
			if p == r || strings.HasPrefix(p, r+"/") {
				covered := false
				for _, o := range out {
					covered = covered || p == o || strings.HasPrefix(p, o+"/")
				}
				if !covered {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// hostPaths are the host directories a machine's daemons read: the
// machine's own directory and those of every file the user data names.
func hostPaths(c *BootConfig) []string {
	dirs := []string{c.Dir, c.Bin.CNIDir}
	for _, f := range []string{c.Bin.Kubelet, c.Bin.KubeProxy, c.Bin.Containerd, c.Bin.Shim, c.Bin.Runc, c.CAFile,
		c.ServingCertFile, c.ServingKeyFile, c.KubeProxyKubeconfig, c.RegistryCAFile, c.CredentialProviderConfig} {
		if f != "" {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	if c.Bin.CredentialProviderDir != "" {
		dirs = append(dirs, c.Bin.CredentialProviderDir)
	}
	return dirs
}

// containerdConfig renders containerd's config (version 3, containerd 2.x).
func containerdConfig(c *BootConfig, l layout) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %[1]q
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "/var/lib/containerd/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[2]q
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = %[3]q
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # The machine has no CAP_SYS_RESOURCE: no process may lower its
    # oom_score_adj; containers get at least containerd's own.
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[4]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[5]q]
      conf_dir = %[6]q
      # Written once kubelet passes the Node's pod CIDR (from node IPAM).
      conf_template = %[7]q
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
`, ContainerdSocket, c.SandboxImage, l.certsD(), c.Bin.Runc, c.Bin.CNIDir, l.cniConfDir(), l.etc("cni-template.json"))
}

// cniTemplate is the pod network: a point-to-point veth per pod with an
// address of each of the node's pod CIDRs (one per family: containerd
// fills in the Node's podCIDRs and a default route per family);
// cross-node traffic goes by the node's default route to the VPC router,
// which has the cloud's routes.
func cniTemplate() string {
	return `{
  "cniVersion": "1.0.0",
  "name": "portside",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local",
              "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}],
              "routes": [{{range $i, $r := .Routes}}{{if $i}}, {{end}}{"dst": "{{$r}}"}{{end}}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`
}

// hostsTOML is a containerd registry mirror: pulls of host go to the
// cloud's registry first (and only: no public registry is reachable).
func hostsTOML(host, mirror, ca string) string {
	s := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+host, mirror)
	if ca != "" {
		s += fmt.Sprintf("  ca = %q\n", ca)
	}
	return s
}

// kubeletConfig renders kubelet's KubeletConfiguration.
func kubeletConfig(c *BootConfig) string {
	dns := "[]"
	if c.ClusterDNS != "" {
		dns = fmt.Sprintf("[%q]", c.ClusterDNS)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 hierarchies: kubelet 1.37 needs this to run
# there at all (cgroup v2 hosts ignore it).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%[2]s
address: %[3]q
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
failSwapOn: false
# kubelet would write host-wide kernel settings; with this it only reads
# them, and the init shows it the values it wants inside the machine's
# own mount namespace.
protectKernelDefaults: true
# kubelet's default -999 needs CAP_SYS_RESOURCE, which this machine lacks.
oomScoreAdj: 0
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", nodefs.inodesFree: "0%%", imagefs.available: "0%%", imagefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]q}
authorization: {mode: Webhook}
%[5]s
rotateCertificates: true
clusterDNS: %[6]s
clusterDomain: %[7]q
resolvConf: ""
volumePluginDir: /var/lib/kubelet/volumeplugins
serializeImagePulls: false
nodeStatusReportFrequency: 10s
`, c.CgroupRoot, ContainerdSocket, c.NodeIP, c.CAFile, servingCert(c), dns, c.ClusterDomain)
}

// servingCert is kubelet's serving certificate: the one the user data
// gives, or else one kubelet asks for by a kubernetes.io/kubelet-serving
// CSR (approved by the CCM's node-serving-csr-approver against the cloud's
// record of the instance).
func servingCert(c *BootConfig) string {
	if c.ServingCertFile != "" {
		return fmt.Sprintf("tlsCertFile: %q\ntlsPrivateKeyFile: %q", c.ServingCertFile, c.ServingKeyFile)
	}
	return "serverTLSBootstrap: true"
}

// kubeletArgs are kubelet's flags.
func kubeletArgs(c *BootConfig, l layout) []string {
	args := []string{
		"--config=" + l.etc("kubelet.yaml"),
		"--bootstrap-kubeconfig=" + l.etc("bootstrap-kubeconfig"),
		"--kubeconfig=" + kubeletDir + "/kubeconfig",
		"--cert-dir=" + kubeletDir + "/pki",
		"--hostname-override=" + c.NodeName,
		"--node-ip=" + c.nodeIPs(),
		"--cloud-provider=external",
		fmt.Sprintf("--v=%d", c.Verbosity),
	}
	if len(c.NodeLabels) > 0 {
		keys := make([]string, 0, len(c.NodeLabels))
		for k := range c.NodeLabels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		labels := make([]string, len(keys))
		for i, k := range keys {
			labels[i] = k + "=" + c.NodeLabels[k]
		}
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	if c.CredentialProviderConfig != "" {
		args = append(args, "--image-credential-provider-config="+c.CredentialProviderConfig,
			"--image-credential-provider-bin-dir="+c.Bin.CredentialProviderDir)
	}
	return args
}

// bootstrapKubeconfig is kubelet's TLS-bootstrap credential.
func bootstrapKubeconfig(c *BootConfig) string {
	return kubeconfigYAML(c.APIServer, c.CAFile, "kubelet-bootstrap", fmt.Sprintf("{token: %q}", c.BootstrapToken))
}

// kubeconfigYAML is a kubeconfig of one cluster, user and context.
func kubeconfigYAML(server, caFile, userName, user string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: portside
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: %s
contexts:
- name: %s
  context: {cluster: portside, user: %s}
current-context: %s
`, server, caFile, userName, user, userName, userName, userName)
}

// kubeProxyConfig renders kube-proxy's KubeProxyConfiguration.
func kubeProxyConfig(c *BootConfig) string {
	mode := c.ProxyMode
	if mode == "" {
		mode = "nftables"
	}
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: %s
hostnameOverride: %q
clusterCIDR: %q
# Inside the machine's namespace "all addresses" are the machine's own:
# the cloud's load balancers health-check this port.
healthzBindAddress: %[5]s
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["primary"]
oomScoreAdj: 0
# The conntrack table size is host-wide: leave it and the timeouts alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, c.KubeProxyKubeconfig, mode, c.NodeName, c.ClusterCIDR, proxyHealthz(c))
}

// proxyHealthz is kube-proxy's healthz address: every address of the
// node's family (an IPv6-only node's kube-proxy serves IPv6 alone).
func proxyHealthz(c *BootConfig) string {
	if c.IPv6Only {
		return `"[::]:10256"`
	}
	return "0.0.0.0:10256"
}

// kernelDefaults are the values kubelet's protectKernelDefaults expects
// (it only reads them then); shown read-only inside the machine.
var kernelDefaults = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// render writes every file the daemons read into Dir.
func render(c *BootConfig, l layout) error {
	files := map[string]string{
		l.etc("containerd.toml"):      containerdConfig(c, l),
		l.etc("cni-template.json"):    cniTemplate(),
		l.etc("kubelet.yaml"):         kubeletConfig(c),
		l.etc("bootstrap-kubeconfig"): bootstrapKubeconfig(c),
		l.etc("kube-proxy.yaml"):      kubeProxyConfig(c),
	}
	for host, mirror := range c.Mirrors {
		files[filepath.Join(l.certsD(), host, "hosts.toml")] = hostsTOML(host, mirror, c.RegistryCAFile)
	}
	for k, v := range kernelDefaults {
		files[filepath.Join(l.dir, "sysctl", strings.ReplaceAll(k, "/", "."))] = v + "\n"
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.MkdirAll(filepath.Dir(n), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(n, []byte(files[n]), 0o600); err != nil {
			return err
		}
	}
	for _, d := range []string{l.cniConfDir(), l.log(""), filepath.Join(l.dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for _, r := range l.rebinds() {
		if err := os.MkdirAll(r[0], 0o755); err != nil {
			return err
		}
	}
	return nil
}

// nodeIPs is kubelet's --node-ip: the IPv4 address, and the IPv6 one after
// it in a dual-stack VPC (the first is the Node's primary family).
func (c *BootConfig) nodeIPs() string {
	if c.NodeIP6 != "" {
		return c.NodeIP + "," + c.NodeIP6
	}
	return c.NodeIP
}
