package cli

import (
	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/realnode"
)

// newMachineBootCommand is a real machine's init, started by the local
// cloud inside the machine's namespaces; not for users, hence hidden.
func newMachineBootCommand() *cobra.Command {
	var config string
	cmd := &cobra.Command{
		Use:    "machine-boot",
		Short:  "Boot a real machine of the local cloud (run by the cloud inside the machine's namespaces)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := realnode.Load(config)
			if err != nil {
				return err
			}
			return realnode.Boot(cmd.Context(), c)
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "the machine's boot configuration (JSON user data)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
