package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/devenv"
)

const defaultDataDir = "_output/up"

func newUpCommand() *cobra.Command {
	opts := devenv.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local Kubernetes control plane with Portside on this machine",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			return devenv.Up(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.DataDir, "data-dir", defaultDataDir, "directory for the environment's state, kept between runs")
	cmd.Flags().BoolVar(&opts.Once, "once", false, "verify the environment, then stop (for scripts and tests)")
	cmd.Flags().BoolVar(&opts.Purge, "purge", false, "remove the data directory when stopping")
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
	cmd.Flags().BoolVar(&purge, "purge", false, "also remove the data directory")
	return cmd
}
