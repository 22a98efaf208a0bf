package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

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
	cmd := newProxyCommand("proxy-agent", "Run the network proxy agent (konnectivity-compatible)",
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
	cmd.AddCommand(newProxyAgentProbeCommand())
	return cmd
}

// newProxyAgentProbeCommand is the DaemonSet's liveness probe: the agent's
// health server binds loopback only (nothing off the node can read its
// metrics), which the kubelet's httpGet probes, sent to the pod IP, cannot
// reach; an exec probe runs in the pod's network namespace and can.
func newProxyAgentProbeCommand() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Probe a proxy agent's health endpoint (an exec liveness probe)",
		Long: "GET a proxy agent's /healthz (or another URL) and exit 0 on 200, 1 otherwise:\n" +
			"an exec probe for an agent whose health server listens on loopback only.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return fmt.Errorf("--url %q: %w", url, err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("proxy agent not healthy: %w", err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("proxy agent not healthy: %s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8093/healthz", "URL to GET (the agent's --health-server-host/--health-server-port).")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "How long to wait for the answer.")
	return cmd
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
