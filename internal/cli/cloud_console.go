package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newCloudConsoleCommand(f *cloudFlags) *cobra.Command {
	var readOnly bool
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Print a one-time login link to the cloud's web console",
		Long: `Print a one-time link that logs a browser in to the local cloud's web
console (instances, load balancers and their backends' health, routes,
volumes, registries, recent API calls, injected faults; with the cluster side
when the cloud was started with --console-kubeconfig, as under portside up).
The link works once, within 10 minutes; the login then lasts 12 hours. With
--read-only the session cannot change faults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			url, t, err := c.ConsoleTicket(cmd.Context(), readOnly)
			if err != nil {
				return err
			}
			mode := "read-write"
			if readOnly {
				mode = "read-only"
			}
			if f.output == "json" {
				return f.print(cmd.OutOrStdout(), map[string]any{"url": url, "expiresAt": t.ExpiresAt, "readOnly": readOnly}, "", nil)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n(%s, works once, until %s)\n", url, mode, t.ExpiresAt.Local().Format(time.Kitchen))
			return nil
		},
	}
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "the session cannot change faults")
	return cmd
}
