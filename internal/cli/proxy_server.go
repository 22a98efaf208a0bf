package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

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
			a, err := agent.New(o)
			if err != nil {
				return nil, err
			}
			return agentRunner{a}, nil
		})
}

// agentRunner runs the agent as upstream's proxy-agent handles signals:
// the first SIGTERM/SIGINT (which cancels the command's context) drains,
// the second ends the drain at once.
type agentRunner struct{ a *agent.Agent }

func (r agentRunner) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		// Every signal reaches sigs too, the first included.
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					r.a.ForceStop()
					return
				}
			case <-done:
				return
			}
		}
	}()
	return r.a.Run(ctx)
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
