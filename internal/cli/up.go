package cli

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/devenv"
)

const defaultDataDir = "_output/up"

func newUpCommand() *cobra.Command {
	opts := devenv.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run Portside on this machine: control plane, local cloud, simulated nodes and the CCM",
		Long: "Start etcd and kube-apiserver (from `make tools`), the local cloud, its nodes and the cloud\n" +
			"controller manager; create a LoadBalancer Service and send a request through its VIP.\n" +
			"Nodes are real machines of the local cloud (containerd, kubelet, kube-proxy, real pods) where\n" +
			"this machine allows it (root, namespaces, cgroups, overlay), else simulated, saying why.\n" +
			"State is kept in --data-dir between runs. Ctrl-C or `portside down` stops everything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// When whoever reads up's output is gone (a test binary killed,
			// a pipe's reader exited), a write to stdout must not kill up:
			// Go ends a program on SIGPIPE from fd 1 or 2, and up would die
			// mid-shutdown, its children killed by their parent-death signal
			// before the cloud removes its machines. Ignored, such a write
			// fails and up goes on stopping what it started.
			signal.Ignore(syscall.SIGPIPE)
			opts.Out = cmd.OutOrStdout()
			return devenv.Up(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.DataDir, "data-dir", defaultDataDir, "directory for the environment's state, kept between runs")
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 3, fmt.Sprintf("number of nodes, spread over --zones zones (at most %d real, %d simulated)", devenv.MaxRealNodes, devenv.MaxNodes))
	cmd.Flags().StringVar(&opts.Install, "install", devenv.InstallHost, "how the CCM runs: host (processes of up); chart (up pushes Portside's image to the local cloud's registry and installs the Helm chart deploy/helm/portside with Helm's library: the CCM's pods on the real nodes); manifests (the same image, deploy/ccm's manifests applied with kubectl); prepare (no CCM: the image pushed, the Secrets made and the values written to <data dir>/chart-values.yaml for your own helm install, or to rehearse leader migration from a kube-controller-manager running the cloud controllers; docs/install.md). chart, manifests and prepare need real nodes")
	cmd.Flags().StringVar(&opts.IPFamily, "ip-family", devenv.IPFamilyIPv4, "ipv4; dual: nodes (real) with an address of each family in the cloud's dual-stack VPC, pod CIDRs and Services of both families, cloud routes of both; or ipv6: an IPv6-only cluster (node IPs, pods, Services, load balancers) on that VPC (docs/local-cloud.md)")
	cmd.Flags().IntVar(&opts.Zones, "zones", 0, fmt.Sprintf("how many of the local cloud's zones (zone-a, zone-b, zone-c) the nodes are spread over, round-robin; 0: %d (1 with one node). Topology-aware routing specs need 3 zones of 2 nodes each: --zones 3 --nodes 6", devenv.DefaultZones))
	cmd.Flags().BoolVar(&opts.Once, "once", false, "stop after the request through the LoadBalancer VIP (for scripts and tests)")
	cmd.Flags().BoolVar(&opts.Purge, "purge", false, "remove the data directory when stopping (only one portside up created: it has a .portside-up marker)")
	cmd.Flags().BoolVar(&opts.ConsoleReadWrite, "console-read-write", false, "print a read-write web console link (one that can set faults) instead of a read-only one")
	cmd.Flags().IntVar(&opts.CCMReplicas, "ccm-replicas", 1, fmt.Sprintf("number of CCMs; more than one elect a leader, as a highly available CCM (at most %d)", devenv.MaxCCMReplicas))
	cmd.Flags().StringVar(&opts.NetworkProxyBinaries, "network-proxy-binaries", "", "run proxy-server and proxy-agent from this directory instead of Portside's, with upstream's flags (upstream apiserver-network-proxy's, as `make tools` builds them), to compare the two on one cluster (docs/benchmarks.md); upstream's server trusts the addresses an agent claims, so not for use")
	cmd.Flags().StringVar(&opts.CCMBinary, "ccm-binary", "", "run this cloud-controller-manager binary instead of `portside ccm`, with upstream's flags (e.g. upstream's own built with the local provider, as the conformance suite compares; see docs/conformance.md)")
	cmd.Flags().StringVar(&opts.NodeMode, "node-mode", devenv.NodeModeAuto, "auto (default): real where the machine allows it, else simulated saying why and what to change; simulated: nodes are registered Node objects with kube-proxy stand-ins (thousands fit: for scale); real: each node is a real machine of the local cloud (its own network and mount namespaces and cgroups) running containerd, kubelet and kube-proxy, with real pods (needs root; see docs/local-cloud.md)")
	cmd.Flags().BoolVar(&opts.NetworkProxy, "network-proxy", true, "send kube-apiserver's cluster egress (logs, exec, port-forward, node proxy) through portside proxy-server and one proxy-agent per zone, as konnectivity does (about 0.4 s more start-up; --network-proxy=false sends it directly)")
	return cmd
}

func newDownCommand() *cobra.Command {
	var dataDir string
	var purge bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a running `portside up`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			return devenv.Down(ctx, dataDir, purge, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "data directory of the environment to stop")
	cmd.Flags().BoolVar(&purge, "purge", false, "also remove the data directory (only one portside up created: it has a .portside-up marker)")
	return cmd
}

func newStatusCommand() *cobra.Command {
	var dataDir, output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the nodes and load balancers of a running `portside up`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			rep, err := devenv.Status(ctx, dataDir)
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), rep, output)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "data directory of the environment")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}
