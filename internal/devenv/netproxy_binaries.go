package devenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/portside-io/portside/internal/tools"
)

// `up --network-proxy-binaries DIR` runs another proxy-server and
// proxy-agent (upstream apiserver-network-proxy's, as `make tools` builds
// them) in the places Portside's run: the server beside kube-apiserver, the
// host's default-route agent, and each real node's agent inside its
// machine. It exists so that kube-apiserver's streams (exec, port-forward,
// logs) through real kubelets can be measured through both proxies on the
// same cluster (BenchmarkUpRealNodesKubectlStreams). Upstream's binaries
// take upstream's flags only, so Portside's own are left out: the server's
// route-claim checks (--allow-route-claims, and --kubeconfig, which it
// reads Nodes with) and the agents' --drain-timeout. Upstream's server then
// believes whatever an agent claims to serve; up says so.

// portsideOnlyProxyFlags are the flags up gives Portside's proxy-server and
// proxy-agent that upstream's v0.34 binaries do not define (they would
// refuse to start: --allow-route-claims, --drain-timeout) or take for
// something else (--kubeconfig: upstream's server reads agents' tokens and
// leases with it, not Nodes, and up gives it none of those to do).
var portsideOnlyProxyFlags = []string{"--allow-route-claims", "--kubeconfig", "--drain-timeout"}

// upstreamProxyArgs is args without the flags only Portside's proxy
// defines, for upstream's binaries; args unchanged for Portside's.
func upstreamProxyArgs(args []string, upstream bool) []string {
	if !upstream {
		return args
	}
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		keep := true
		for _, f := range portsideOnlyProxyFlags {
			if name == f {
				keep = false
			}
		}
		if keep {
			out = append(out, a)
		}
	}
	return out
}

// checkNetworkProxyBinaries says what is wrong with --network-proxy-binaries
// dir: it needs the network proxy, the agents as up runs them (not the
// chart's DaemonSet of Portside's image), and both binaries in dir.
func checkNetworkProxyBinaries(dir string, networkProxy bool, install string) error {
	if dir == "" {
		return nil
	}
	if !networkProxy {
		return fmt.Errorf("--network-proxy-binaries %s runs another network proxy, and --network-proxy=false runs none: drop one of them", dir)
	}
	switch install {
	case InstallChart, InstallManifests, InstallPrepare:
		return fmt.Errorf("--install=%s runs the nodes' proxy agents from Portside's image; --network-proxy-binaries runs other agents in the machines: give one of them", install)
	}
	for _, name := range []string{tools.ANPProxyServer, tools.ANPProxyAgent} {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("--network-proxy-binaries %s: %w: the directory needs %s and %s (upstream's, built by `make tools` into _output/tools/<versions>/bin)", dir, err, tools.ANPProxyServer, tools.ANPProxyAgent)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("--network-proxy-binaries %s: %s is not an executable file", dir, p)
		}
	}
	return nil
}

// proxyCommand is the binary and leading arguments that run the network
// proxy's part ("proxy-server" or "proxy-agent"): Portside's own
// subcommand, or the binary of that name in --network-proxy-binaries.
func (env *environment) proxyCommand(part string) (exe string, lead []string, err error) {
	if env.netproxyBinaries != "" {
		exe, err := filepath.Abs(filepath.Join(env.netproxyBinaries, part))
		return exe, nil, err
	}
	exe, err = os.Executable()
	return exe, []string{part}, err
}
