package tools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Names of the binaries a real node runs, built by `make tools` into the
// same directory as the control plane (hack/tools/build.sh).
const (
	// Kubelet and KubeProxy are k8s.io/kubernetes at KUBE_VERSION, built
	// in the control plane's go build.
	Kubelet   = "kubelet"
	KubeProxy = "kube-proxy"
	// Containerd, ContainerdShimRuncV2, Ctr are containerd at
	// CONTAINERD_VERSION and Crictl cri-tools at CRI_TOOLS_VERSION, static
	// (hack/tools/node).
	Containerd           = "containerd"
	ContainerdShimRuncV2 = "containerd-shim-runc-v2"
	Ctr                  = "ctr"
	Crictl               = "crictl"
	// Pause is our own sandbox program (cmd/portside-pause) and Agnhost
	// k8s.io/kubernetes/test/images/agnhost, both static: internal/nodeimages
	// packages them as images.
	Pause   = "pause"
	Agnhost = "agnhost"
	// CoreDNS is github.com/coredns/coredns at COREDNS_VERSION, static
	// (hack/tools/coredns): the cluster's DNS, packaged as an image.
	CoreDNS = "coredns"
	// CNIDir is the subdirectory of the bin directory holding the CNI
	// plugins (CNI_PLUGINS_VERSION): containerd's cni bin_dirs.
	CNIDir = "cni"
)

// CNIPlugins are the plugins `make tools` builds into CNIDir.
var CNIPlugins = []string{"bridge", "host-local", "loopback", "portmap", "ptp"}

// Programs a real node runs from the host's packages, not built here
// (hack/ensure-node-packages.sh installs them).
const (
	// Runc is the OCI runtime containerd-shim-runc-v2 execs.
	Runc = "runc"
	// Nft is what kube-proxy's nftables mode and CNI portmap exec.
	Nft = "nft"
	// Iptables is for kube-proxy's iptables mode.
	Iptables = "iptables"
)

// CNIBinDir returns dir/cni once every plugin of CNIPlugins is in it, or
// an error naming the first missing one and how to build it.
func CNIBinDir(dir string) (string, error) {
	cni := filepath.Join(dir, CNIDir)
	for _, p := range CNIPlugins {
		if _, err := Path(cni, p); err != nil {
			return "", fmt.Errorf("CNI plugin %w", err)
		}
	}
	return cni, nil
}

// sbinDirs are searched after PATH: Debian installs runc, nft and iptables
// in /usr/sbin, which is not on every user's PATH.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// SystemPath finds a program of the host's packages (Runc, Nft, Iptables)
// on PATH or in the sbin directories, or says how to install it.
func SystemPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %v: run hack/ensure-node-packages.sh (or `make node-packages`) to install Debian's %s", name, sbinDirs, debianPackage(name))
}

// debianPackage is the package that ships a system program.
func debianPackage(name string) string {
	switch name {
	case Nft:
		return "nftables"
	default:
		return name
	}
}

// NodeBinaries are the paths of everything a real node runs.
type NodeBinaries struct {
	Kubelet, KubeProxy                    string
	Containerd, ContainerdShimRuncV2, Ctr string
	// CNIBinDir holds the CNI plugins.
	CNIBinDir string
	// Runc and Nft come from the host's packages.
	Runc, Nft string
}

// FindNodeBinaries looks up what a real node runs: the binaries `make tools`
// built in dir, and runc and nft from the host. The error lists every one
// missing, each saying how to get it.
func FindNodeBinaries(dir string) (NodeBinaries, error) {
	var b NodeBinaries
	var errs []error
	for _, f := range []struct {
		dst  *string
		name string
	}{
		{&b.Kubelet, Kubelet}, {&b.KubeProxy, KubeProxy},
		{&b.Containerd, Containerd}, {&b.ContainerdShimRuncV2, ContainerdShimRuncV2}, {&b.Ctr, Ctr},
	} {
		p, err := Path(dir, f.name)
		*f.dst = p
		errs = append(errs, err)
	}
	var err error
	b.CNIBinDir, err = CNIBinDir(dir)
	errs = append(errs, err)
	b.Runc, err = SystemPath(Runc)
	errs = append(errs, err)
	b.Nft, err = SystemPath(Nft)
	errs = append(errs, err)
	return b, errors.Join(errs...)
}
