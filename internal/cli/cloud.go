package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

const defaultCloudDataDir = "_output/cloud"

// cloudFlags are shared by the `portside cloud` verbs.
type cloudFlags struct {
	dataDir  string
	endpoint string
	token    string
	output   string
}

// client builds an API client from --endpoint/--token, or from the files
// a cloud serving from --data-dir keeps.
func (f *cloudFlags) client() (*client.Client, error) {
	endpoint, token := f.endpoint, f.token
	if endpoint == "" {
		data, err := os.ReadFile(filepath.Join(f.dataDir, server.EndpointFile))
		if err != nil {
			return nil, fmt.Errorf("no local cloud is serving from --data-dir %s (start one with `portside cloud serve`, or give --endpoint)", f.dataDir)
		}
		endpoint = strings.TrimSpace(string(data))
	}
	if token == "" {
		tok, err := client.ReadTokenFile(filepath.Join(f.dataDir, server.TokenFile))
		if err != nil {
			return nil, fmt.Errorf("no token: give --token or a --data-dir with a token file: %w", err)
		}
		token = tok
	}
	return client.New(endpoint, token), nil
}

// print writes v as JSON, or as a table of header + rows.
func (f *cloudFlags) print(w io.Writer, v any, header string, rows func(tw io.Writer)) error {
	switch f.output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "", "table":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, header)
		rows(tw)
		return tw.Flush()
	default:
		return fmt.Errorf("--output %q is not supported: use table or json", f.output)
	}
}

func newCloudCommand() *cobra.Command {
	f := &cloudFlags{}
	cmd := &cobra.Command{
		Use:   "cloud",
		Short: "Run and manage the local reference cloud",
	}
	cmd.PersistentFlags().StringVar(&f.dataDir, "data-dir", defaultCloudDataDir, "the cloud's data directory (state, token and endpoint files)")
	cmd.PersistentFlags().StringVar(&f.endpoint, "endpoint", "", "API endpoint (default: read from --data-dir)")
	cmd.PersistentFlags().StringVar(&f.token, "token", "", "bearer token (default: read from --data-dir)")
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	cmd.AddCommand(newCloudServeCommand(f), newCloudInstancesCommand(f), newCloudLBsCommand(f),
		newCloudRoutesCommand(f), newCloudVolumesCommand(f), newCloudRegistriesCommand(f),
		newCloudZonesCommand(f), newCloudFaultsCommand(f), newCloudConsoleCommand(f))
	return cmd
}

func newCloudServeCommand(f *cloudFlags) *cobra.Command {
	var (
		opts                               server.RunOptions
		vipPool, vipPool6, nodePool, node6 string
		regions                            string
		machines                           machineFlags
		lbKernelPath                       bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the local cloud's API and load balancers until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DataDir = f.dataDir
			for _, pf := range []struct {
				flag, val string
				dst       *netip.Prefix
			}{
				{"--vip-pool", vipPool, &opts.VIPPoolV4}, {"--vip-pool-v6", vipPool6, &opts.VIPPoolV6},
				{"--node-pool", nodePool, &opts.NodePoolV4}, {"--node-pool-v6", node6, &opts.NodePoolV6},
			} {
				if pf.val == "" {
					continue
				}
				p, err := netip.ParsePrefix(pf.val)
				if err != nil {
					return fmt.Errorf("%s %q is not a CIDR (want e.g. 127.100.0.0/16)", pf.flag, pf.val)
				}
				*pf.dst = p
			}
			var err error
			if opts.Regions, err = parseRegions(regions); err != nil {
				return err
			}
			if opts.Machines, err = machines.options(opts.DataDir, opts.NodePoolV4, opts.NodePoolV6); err != nil {
				return err
			}
			opts.NoLBKernelPath = !lbKernelPath
			opts.Ready = func(endpoint string) {
				fmt.Fprintf(cmd.OutOrStdout(), "local cloud serving at %s (data in %s; token in %s)\nweb console: %s/console/ (log in with a token, or `portside cloud console` for a one-time link)\n",
					endpoint, opts.DataDir, filepath.Join(opts.DataDir, server.TokenFile), endpoint)
			}
			return server.Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	machines.add(fl)
	fl.BoolVar(&lbKernelPath, "lb-kernel-path", true, "with --machines=real: the VPC router forwards proxied load balancers' new flows to the backends in the kernel (nftables address rewriting in the router's namespace, health checks and drain as the proxy's); false: the proxy serves every flow")
	fl.StringVar(&opts.Listen, "listen", "127.0.0.1:8780", "API address (port 0 picks a free port; see <data-dir>/endpoint)")
	fl.StringVar(&opts.RegistryListen, "registry-listen", "127.0.0.1:0", `address of the served OCI registry (port 0 picks a free port; see <data-dir>/registry-endpoint); "" serves none`)
	fl.StringSliceVar(&opts.RegistryPublicPrefixes, "registry-public-prefix", nil, `a public repository of the served registry, pulled without a credential (a name, or a prefix ending in "/"); repeatable`)
	fl.DurationVar(&opts.CredentialTTL, "credential-ttl", time.Hour, "lifetime of the registry credentials the cloud issues")
	fl.StringVar(&opts.TokenFile, "token-file", "", "bearer token file (default <data-dir>/token, generated if missing)")
	fl.StringVar(&opts.ViewerTokenFile, "viewer-token-file", "", "the web console's read-only token file (default <data-dir>/viewer-token, generated if missing)")
	fl.StringVar(&opts.ScopedTokenFile, "scoped-token-file", "", "file of API tokens limited to named operations, lines `<token> <scope>[,<scope>...]` (default <data-dir>/scoped-tokens, read if present; mode 0600)")
	fl.StringVar(&opts.ConsoleKubeconfig, "console-kubeconfig", "", "kubeconfig of the cluster the web console joins (Service → load balancer → nodes → pods); it may appear later")
	fl.StringVar(&vipPool, "vip-pool", "127.100.0.0/16", "IPv4 range for load-balancer VIPs (on loopback)")
	fl.StringVar(&vipPool6, "vip-pool-v6", "", "IPv6 range for load-balancer VIPs; must be routed to lo (ip -6 route add local <range> dev lo)")
	fl.StringVar(&nodePool, "node-pool", "127.1.0.0/16", "IPv4 range for instance addresses")
	fl.StringVar(&node6, "node-pool-v6", "fd00:1::/64", "IPv6 range for instance addresses")
	fl.StringVar(&regions, "regions", "region-1=zone-a,zone-b,zone-c", "regions and zones: region=zone,zone;region=zone")
	fl.DurationVar(&opts.DataPlane.HealthInterval, "health-interval", time.Second, "interval of backend health checks")
	fl.DurationVar(&opts.DataPlane.DrainTimeout, "drain-timeout", 30*time.Second, "how long connections to a removed backend (or one whose port or health check changed) may continue")
	fl.DurationVar(&opts.DataPlane.UDPIdleTimeout, "udp-idle-timeout", 60*time.Second, "a UDP flow ends after this much silence")
	fl.IntVar(&opts.DataPlane.MaxConnsPerLoadBalancer, "max-conns-per-lb", 10000, "open TCP connections one load balancer may proxy; more are reset at accept (-1: no cap)")
	fl.IntVar(&opts.DataPlane.MaxConns, "max-conns", 50000, "open TCP connections all load balancers together may proxy (-1: no cap)")
	fl.IntVar(&opts.DataPlane.MaxUDPFlowsPerLoadBalancer, "max-udp-flows-per-lb", 10000, "UDP flows (client address:port) one load balancer may track; datagrams of new flows over it are dropped (-1: no cap)")
	fl.IntVar(&opts.DataPlane.MaxUDPFlows, "max-udp-flows", 50000, "UDP flows all load balancers together may track (-1: no cap)")
	return cmd
}

func parseRegions(s string) ([]api.Region, error) {
	var out []api.Region
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ";") {
		name, zones, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || zones == "" {
			return nil, fmt.Errorf("--regions %q: want region=zone,zone;region=zone", s)
		}
		r := api.Region{Name: name}
		for _, z := range strings.Split(zones, ",") {
			z = strings.TrimSpace(z)
			if z == "" || seen[z] {
				return nil, fmt.Errorf("--regions %q: zone %q is empty or listed twice", s, z)
			}
			seen[z] = true
			r.Zones = append(r.Zones, z)
		}
		out = append(out, r)
	}
	return out, nil
}
