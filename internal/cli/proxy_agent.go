package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/netproxy/agent"
)

func newProxyAgentCommand() *cobra.Command {
	f := agent.NewFlags()
	cmd := &cobra.Command{
		Use:   "proxy-agent",
		Short: "Run the network proxy agent (konnectivity-compatible)",
		Long: "Run a konnectivity-compatible network proxy agent: it connects to every proxy server behind\n" +
			"--proxy-server-host and dials, in the cluster network, what the servers ask for. Accepts upstream proxy-agent's flags.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			o, err := f.Options(cmd.Flags(), klog.FromContext(ctx))
			if err != nil {
				return err
			}
			a, err := agent.New(o)
			if err != nil {
				return err
			}
			return a.Run(ctx)
		},
	}
	f.AddFlags(cmd.Flags())
	return cmd
}
