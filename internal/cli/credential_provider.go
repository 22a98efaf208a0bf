package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/credentialplugin"
)

// errExitCode ends the process with status 1 after the subcommand has
// printed its own message.
var errExitCode = errors.New("")

// newCredentialProviderCommand is the kubelet exec plugin. Its flags are
// parsed by the plugin itself, so that `portside credential-provider` and
// the lean portside-credential-provider binary behave the same.
func newCredentialProviderCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "credential-provider",
		Short:              "Kubelet image credential provider (exec plugin, credentialprovider.kubelet.k8s.io/v1)",
		Long:               credentialplugin.Usage + "  run `portside credential-provider --help` for the flags",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if credentialplugin.Main("portside credential-provider", args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()) != 0 {
				return errExitCode
			}
			return nil
		},
	}
}
