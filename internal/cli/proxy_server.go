package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/netproxy/server"
)

func newProxyServerCommand() *cobra.Command {
	f := server.NewFlags()
	cmd := &cobra.Command{
		Use:   "proxy-server",
		Short: "Run the network proxy server (konnectivity-compatible)",
		Long: "Run a konnectivity-compatible network proxy server: kube-apiserver dials through it (gRPC or\n" +
			"HTTP CONNECT) and agents carry the dials into the cluster network. Accepts upstream proxy-server's flags.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			o, err := f.Options(cmd.Flags(), klog.FromContext(ctx))
			if err != nil {
				return err
			}
			s, err := server.New(o)
			if err != nil {
				return err
			}
			return s.Run(ctx)
		},
	}
	f.AddFlags(cmd.Flags())
	return cmd
}
