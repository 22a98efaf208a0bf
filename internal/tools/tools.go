// Package tools locates the pinned binaries `make tools` builds: the
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubectl, and upstream apiserver-network-proxy's
// proxy-server and proxy-agent), the kubelet-credential-harness test
// helper, and what a real node runs (node.go: kubelet, kube-proxy,
// containerd, the CNI plugins, pause and agnhost; runc and nft from the
// host's packages).
package tools

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvBinDir overrides where the binaries are looked for.
const EnvBinDir = "PORTSIDE_TOOLS_BIN"

// Names of the binaries `make tools` builds.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubectl               = "kubectl"
	// ANPProxyServer and ANPProxyAgent are upstream apiserver-network-proxy
	// (konnectivity) cmd/server and cmd/agent at ANP_VERSION.
	ANPProxyServer = "proxy-server"
	ANPProxyAgent  = "proxy-agent"
	// KubeletCredentialHarness runs the kubelet's image credential provider
	// plugin client at the pinned Kubernetes version, driven by JSON lines
	// on stdin (hack/tools/kubelet-credential-harness).
	KubeletCredentialHarness = "kubelet-credential-harness"
)

// Versions are the pinned tool versions, read from hack/tools/versions.env.
type Versions struct {
	Kube string
	Etcd string
	// ANP is sigs.k8s.io/apiserver-network-proxy (proxy-server, proxy-agent);
	// it shares the directory of Kube's build and is not part of Dir.
	ANP string
	// A real node's parts (hack/tools/node), in the same directory:
	// containerd, the CNI plugins and cri-tools (crictl).
	Containerd, CNIPlugins, CRITools string
	// Agnhost and Pause are image tags: agnhost's upstream VERSION and
	// the pause tag of containerd's default sandbox image.
	Agnhost, Pause string
	// CoreDNS is github.com/coredns/coredns's version (hack/tools/coredns),
	// also its image's tag.
	CoreDNS string
}

// Dir is the directory name under _output/tools for these versions.
func (v Versions) Dir() string { return "kube-" + v.Kube + "_etcd-" + v.Etcd }

// RepoRoot walks up from the working directory to the Portside checkout.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "tools", "versions.env")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside a Portside checkout (no hack/tools/versions.env above the working directory); set " + EnvBinDir)
		}
		dir = parent
	}
}

// ReadVersions parses hack/tools/versions.env of the checkout at root.
func ReadVersions(root string) (Versions, error) {
	path := filepath.Join(root, "hack", "tools", "versions.env")
	f, err := os.Open(path)
	if err != nil {
		return Versions{}, err
	}
	defer func() { _ = f.Close() }()
	var v Versions
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(key, "#") {
			continue
		}
		switch key {
		case "KUBE_VERSION":
			v.Kube = val
		case "ETCD_VERSION":
			v.Etcd = val
		case "ANP_VERSION":
			v.ANP = val
		case "CONTAINERD_VERSION":
			v.Containerd = val
		case "CNI_PLUGINS_VERSION":
			v.CNIPlugins = val
		case "CRI_TOOLS_VERSION":
			v.CRITools = val
		case "AGNHOST_VERSION":
			v.Agnhost = val
		case "PAUSE_VERSION":
			v.Pause = val
		case "COREDNS_VERSION":
			v.CoreDNS = val
		}
	}
	if v.Kube == "" || v.Etcd == "" {
		return Versions{}, fmt.Errorf("%s: KUBE_VERSION and ETCD_VERSION must both be set", path)
	}
	return v, sc.Err()
}

// builtBinDir is the tools directory of the checkout `make build` ran in
// (set with -X), so the binary finds the control plane from any directory.
var builtBinDir string

// BinDir returns the directory holding the tool binaries: $PORTSIDE_TOOLS_BIN,
// _output/tools/<versions>/bin of the enclosing checkout, or that of the
// checkout the binary was built in by `make build`.
func BinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		if builtBinDir != "" {
			return builtBinDir, nil
		}
		return "", err
	}
	v, err := ReadVersions(root)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "tools", v.Dir(), "bin"), nil
}

// Path returns the path of a tool binary in dir, or an error that tells the
// user how to get it.
func Path(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s not found at %s: run `make tools` in the Portside checkout to build the pinned binaries (or set %s)", name, p, EnvBinDir)
	}
	return p, nil
}
