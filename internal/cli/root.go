// Package cli builds the cobra command tree of the portside binary; each
// subcommand lives in its own file and delegates to an internal package.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// NewRootCommand returns the `portside` command with all subcommands.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "portside",
		Short:         "Portside: the Kubernetes cloud-provider stack",
		Long:          "Portside implements Kubernetes' cloud provider layer: a provider SDK, a cloud controller manager,\na local reference cloud and the tools around them, in one binary.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("vmodule"))
	root.AddCommand(newVersionCommand(), newUpCommand(), newDownCommand(), newStatusCommand(), newCloudCommand(), newCCMCommand(),
		newProxyServerCommand(), newProxyAgentCommand(), newCredentialProviderCommand(), newWebhookCommand(), newConformanceCommand())
	root.AddCommand(newMigrateCommand(), newMachineBootCommand())
	return root
}

// Execute runs the command line and returns the process exit code. Errors
// are printed as one line; SIGINT/SIGTERM cancel the command's context.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := NewRootCommand().ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errExitCode) {
			fmt.Fprintln(os.Stderr, "portside: error:", err)
		}
		return 1
	}
	return 0
}
