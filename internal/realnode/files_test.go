package realnode

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"text/template"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func validConfig() *BootConfig {
	return &BootConfig{
		NodeName: "node-1", NodeIP: "198.18.0.11", Dir: "/data/machines/node-1", CgroupRoot: "/process_api/x/ps-1",
		APIServer: "https://198.18.0.1:6443", CAFile: "/data/machines/node-1/ca.crt", BootstrapToken: "abcdef.0123456789abcdef",
		ServingCertFile: "/d/kubelet.crt", ServingKeyFile: "/d/kubelet.key", KubeProxyKubeconfig: "/d/kp.kubeconfig",
		ClusterCIDR: "10.244.0.0/16", ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local", SandboxImage: "registry.k8s.io/pause:3.10.1",
		Bin: Binaries{Kubelet: "/t/kubelet", KubeProxy: "/t/kube-proxy", Containerd: "/t/containerd", Shim: "/t/containerd-shim-runc-v2",
			Runc: "/usr/sbin/runc", CNIDir: "/t/cni"},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*BootConfig)
		want   string
	}{
		{"valid", func(*BootConfig) {}, ""},
		{"no node name", func(c *BootConfig) { c.NodeName = "" }, "nodeName is empty"},
		{"bad node IP", func(c *BootConfig) { c.NodeIP = "198.18.0" }, `nodeIP "198.18.0"`},
		{"bad cluster CIDR", func(c *BootConfig) { c.ClusterCIDR = "10.244.0.0" }, `clusterCIDR "10.244.0.0"`},
		{"dual-stack cluster CIDRs", func(c *BootConfig) { c.ClusterCIDR = "10.244.0.0/16,fd12:3456:789a:100::/56" }, ""},
		{"two IPv4 cluster CIDRs", func(c *BootConfig) { c.ClusterCIDR = "10.244.0.0/16,10.245.0.0/16" }, "two CIDRs of one family"},
		{"three cluster CIDRs", func(c *BootConfig) { c.ClusterCIDR = "10.244.0.0/16,fd12::/56,fd13::/56" }, "at most two CIDRs"},
		{"bad DNS", func(c *BootConfig) { c.ClusterDNS = "dns" }, `clusterDNS "dns"`},
		{"relative binary", func(c *BootConfig) { c.Bin.Kubelet = "kubelet" }, `bin.kubelet "kubelet": want an absolute path`},
		{"unknown proxy mode", func(c *BootConfig) { c.ProxyMode = "ipvs" }, `proxyMode "ipvs": want nftables or iptables`},
		{"no token", func(c *BootConfig) { c.BootstrapToken = "" }, "bootstrapToken is empty"},
		{"dual-stack", func(c *BootConfig) { c.NodeIP6 = "fd12:3456:789a::2" }, ""},
		{"IPv6 address not IPv6", func(c *BootConfig) { c.NodeIP6 = "198.18.0.12" }, `nodeIP6 "198.18.0.12": not an IPv6 address`},
		{"IPv4-mapped IPv6 address", func(c *BootConfig) { c.NodeIP6 = "::ffff:198.18.0.12" }, `nodeIP6 "::ffff:198.18.0.12": not an IPv6 address`},
		{"two IPv6 addresses", func(c *BootConfig) { c.NodeIP, c.NodeIP6 = "fd12::3", "fd12::2" }, "the first must be the IPv4 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHidden(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"/work/main/_output/up/machines/node-1", "/tmp/x"}, nil},
		{[]string{"/var/lib/portside", "/var/library", "/run/user/0/x", "/var/run", "/var/log/x"}, []string{"/run/user/0/x", "/var/lib/portside", "/var/log/x", "/var/run"}},
		// Each once, the outermost only.
		{[]string{"/var/lib/ci/_output/tools/bin/cni", "/var/lib/ci/_output/tools/bin", "/var/lib/ci/_output/tools/bin"}, []string{"/var/lib/ci/_output/tools/bin"}},
	} {
		if got := hidden(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("hidden(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRendered checks the settings each daemon must have on this kind of
// machine, and that nothing they write is a host path.
func TestRendered(t *testing.T) {
	c := validConfig()
	l := layout{dir: c.Dir}
	for _, tc := range []struct {
		what, text string
		want       []string
	}{
		{"containerd", containerdConfig(c, l), []string{
			`root = "/var/lib/containerd"`, `state = "/run/containerd"`, `path = "/var/lib/containerd/opt"`,
			"[plugins.'io.containerd.nri.v1.nri']\n    disable = true", "restrict_oom_score_adj = true",
			"netns_mounts_under_state_dir = true", `BinaryName = "/usr/sbin/runc"`, `bin_dirs = ["/t/cni"]`,
			`conf_dir = "/data/machines/node-1/etc/cni/net.d"`, `conf_template = "/data/machines/node-1/etc/cni-template.json"`,
			`sandbox = "registry.k8s.io/pause:3.10.1"`, `config_path = "/data/machines/node-1/etc/containerd/certs.d"`,
			`stream_server_address = "127.0.0.1"`}},
		{"kubelet", kubeletConfig(c), []string{"failCgroupV1: false", "cgroupDriver: cgroupfs", `cgroupRoot: "/process_api/x/ps-1"`,
			"protectKernelDefaults: true", "oomScoreAdj: 0", `address: "198.18.0.11"`, "healthzBindAddress: 127.0.0.1", "readOnlyPort: 0",
			"webhook: {enabled: true}", "authorization: {mode: Webhook}", `clusterDNS: ["10.96.0.10"]`, `resolvConf: ""`,
			"volumePluginDir: /var/lib/kubelet/volumeplugins"}},
		{"kube-proxy", kubeProxyConfig(c), []string{"mode: nftables", "maxPerCore: 0", "tcpEstablishedTimeout: 0s",
			"tcpCloseWaitTimeout: 0s", "healthzBindAddress: 0.0.0.0:10256", "metricsBindAddress: 127.0.0.1:10249", `clusterCIDR: "10.244.0.0/16"`,
			"oomScoreAdj: 0"}},
		{"kubelet flags", strings.Join(kubeletArgs(c, l), " "), []string{"--cloud-provider=external", "--node-ip=198.18.0.11",
			"--hostname-override=node-1", "--bootstrap-kubeconfig=/data/machines/node-1/etc/bootstrap-kubeconfig"}},
		{"bootstrap kubeconfig", bootstrapKubeconfig(c), []string{`server: "https://198.18.0.1:6443"`, `token: "abcdef.0123456789abcdef"`}},
		{"cni", cniTemplate(), []string{`.PodCIDRRanges`, `"type": "ptp"`, `"ipMasq": false`}},
		{"mirror", hostsTOML("registry.k8s.io", "https://198.18.0.1:5000", "/d/ca.crt"), []string{`server = "https://registry.k8s.io"`,
			`[host."https://198.18.0.1:5000"]`, `capabilities = ["pull", "resolve"]`, `ca = "/d/ca.crt"`}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.text, w) {
				t.Errorf("%s config lacks %q:\n%s", tc.what, w, tc.text)
			}
		}
	}
	if got := kubeletArgs(&BootConfig{CredentialProviderConfig: "/c.yaml", Bin: Binaries{CredentialProviderDir: "/b"}}, l); !slices.Contains(got, "--image-credential-provider-config=/c.yaml") || !slices.Contains(got, "--image-credential-provider-bin-dir=/b") {
		t.Errorf("kubelet flags lack the credential provider: %v", got)
	}
	c.NodeLabels = map[string]string{"portside.io/machine": "real", "a.example/b": "c"}
	if got := kubeletArgs(c, l); !slices.Contains(got, "--node-labels=a.example/b=c,portside.io/machine=real") {
		t.Errorf("kubelet flags lack the node labels in order: %v", got)
	}
	if !strings.Contains(kubeletConfig(c), "tlsCertFile: \"/d/kubelet.crt\"") {
		t.Error("a serving certificate given is not kubelet's")
	}
	c.ServingCertFile, c.ServingKeyFile = "", ""
	if cfg := kubeletConfig(c); !strings.Contains(cfg, "serverTLSBootstrap: true") || strings.Contains(cfg, "tlsCertFile") {
		t.Errorf("no serving certificate given: kubelet must ask for one by CSR:\n%s", cfg)
	}
	c.ProxyMode = "iptables"
	if !strings.Contains(kubeProxyConfig(c), "mode: iptables") {
		t.Error("proxyMode iptables not rendered")
	}
}

// TestKubeconfigsParse reads the rendered kubeconfigs with client-go's own
// loader, as kubelet and kube-proxy do.
func TestKubeconfigsParse(t *testing.T) {
	c := validConfig()
	for _, tc := range []struct {
		name, text, user string
		check            func(*clientcmdapi.AuthInfo) bool
	}{
		{"bootstrap", bootstrapKubeconfig(c), "kubelet-bootstrap", func(a *clientcmdapi.AuthInfo) bool { return a.Token == c.BootstrapToken }},
		{"kube-proxy", KubeProxyKubeconfig("https://198.18.0.1:6443", "/d/ca.crt", "/d/kp.crt", "/d/kp.key"), "kube-proxy",
			func(a *clientcmdapi.AuthInfo) bool {
				return a.ClientCertificate == "/d/kp.crt" && a.ClientKey == "/d/kp.key"
			}},
	} {
		cfg, err := clientcmd.Load([]byte(tc.text))
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, tc.text)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil || ctx.AuthInfo != tc.user || cfg.Clusters[ctx.Cluster] == nil || cfg.Clusters[ctx.Cluster].Server != "https://198.18.0.1:6443" {
			t.Errorf("%s: current context %q does not lead to user %s at the gateway: %+v", tc.name, cfg.CurrentContext, tc.user, cfg)
			continue
		}
		if !tc.check(cfg.AuthInfos[tc.user]) {
			t.Errorf("%s: user %+v", tc.name, cfg.AuthInfos[tc.user])
		}
	}
}

func TestKubeletNodeIPs(t *testing.T) {
	for _, tc := range []struct{ v4, v6, want string }{
		{"198.18.0.11", "", "--node-ip=198.18.0.11"},
		{"198.18.0.11", "fd12:3456:789a::2", "--node-ip=198.18.0.11,fd12:3456:789a::2"},
	} {
		c := validConfig()
		c.NodeIP, c.NodeIP6 = tc.v4, tc.v6
		args := kubeletArgs(c, layout{})
		if !slices.Contains(args, tc.want) {
			t.Errorf("NodeIP %q NodeIP6 %q: kubelet args %v, want %s", tc.v4, tc.v6, args, tc.want)
		}
	}
}

// TestCNITemplateRenders renders the CNI template as containerd does
// (text/template over its PodCIDRRanges and Routes) for one family and for
// two: valid JSON, a range and a default route per family.
func TestCNITemplateRenders(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ranges, route []string
	}{
		{"IPv4", []string{"10.244.1.0/24"}, []string{"0.0.0.0/0"}},
		{"dual-stack", []string{"10.244.1.0/24", "fd12:3456:789a:101::/64"}, []string{"0.0.0.0/0", "::/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tmpl := template.Must(template.New("cni").Parse(cniTemplate()))
			if err := tmpl.Execute(&out, struct {
				PodCIDR               string
				PodCIDRRanges, Routes []string
			}{tc.ranges[0], tc.ranges, tc.route}); err != nil {
				t.Fatal(err)
			}
			var conf struct {
				Plugins []struct {
					IPAM struct {
						Ranges [][]struct{ Subnet string }
						Routes []struct{ Dst string }
					}
				}
			}
			if err := json.Unmarshal(out.Bytes(), &conf); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out.String())
			}
			ipam := conf.Plugins[0].IPAM
			if len(ipam.Ranges) != len(tc.ranges) || len(ipam.Routes) != len(tc.route) {
				t.Fatalf("ranges %v routes %v, want %v, %v", ipam.Ranges, ipam.Routes, tc.ranges, tc.route)
			}
			for i, r := range tc.ranges {
				if ipam.Ranges[i][0].Subnet != r || ipam.Routes[i].Dst != tc.route[i] {
					t.Errorf("range %d: %v via %v, want %s, %s", i, ipam.Ranges[i], ipam.Routes[i], r, tc.route[i])
				}
			}
		})
	}
}
