package cli

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/server"
)

func newProxyServerCommand() *cobra.Command {
	f := server.NewFlags()
	return newProxyCommand("proxy-server", "Run the network proxy server (konnectivity-compatible)",
		"Run a konnectivity-compatible network proxy server: kube-apiserver dials through it (gRPC or\n"+
			"HTTP CONNECT) and agents carry the dials into the cluster network. Accepts upstream proxy-server's flags.",
		f.AddFlags, func(ctx context.Context, fs *pflag.FlagSet) (runner, error) {
			o, err := f.Options(fs, klog.FromContext(ctx))
			if err != nil {
				return nil, err
			}
			return server.New(o)
		})
}

func newProxyAgentCommand() *cobra.Command {
	f := agent.NewFlags()
	return newProxyCommand("proxy-agent", "Run the network proxy agent (konnectivity-compatible)",
		"Run a konnectivity-compatible network proxy agent: it connects to every proxy server behind\n"+
			"--proxy-server-host and dials, in the cluster network, what the servers ask for. Accepts upstream proxy-agent's flags.",
		f.AddFlags, func(ctx context.Context, fs *pflag.FlagSet) (runner, error) {
			o, err := f.Options(fs, klog.FromContext(ctx))
			if err != nil {
				return nil, err
			}
			return agent.New(o)
		})
}

type runner interface{ Run(context.Context) error }

// newProxyCommand is a network-proxy subcommand: flags, then build and run
// until the context (SIGTERM) ends.
func newProxyCommand(use, short, long string, addFlags func(*pflag.FlagSet), build func(context.Context, *pflag.FlagSet) (runner, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := build(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			return r.Run(cmd.Context())
		},
	}
	addFlags(cmd.Flags())
	return cmd
}
