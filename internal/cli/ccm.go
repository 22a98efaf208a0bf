package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/version"
	"github.com/portside-io/portside/pkg/cloud"
	// Providers compiled into the binary register themselves.
	_ "github.com/portside-io/portside/pkg/providers/local"
)

func newCCMCommand() *cobra.Command {
	o := manager.NewOptions()
	known := manager.DefaultControllers()
	var names []string
	for _, c := range known {
		names = append(names, fmt.Sprintf("%s (%s)", c.Name, strings.Join(c.Aliases, ", ")))
	}
	cmd := &cobra.Command{
		Use:   "ccm",
		Short: "Run the cloud controller manager",
		Long: "Run Portside's cloud controller manager against a cluster, with a registered cloud provider.\n\n" +
			"Registered providers: " + strings.Join(cloud.Registered(), ", ") + "\n" +
			"Controllers: " + strings.Join(names, "; "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Upstream's --version (and --version=raw) print and exit.
			if raw, ok := o.VersionRequested(); ok {
				if raw {
					fmt.Fprintf(cmd.OutOrStdout(), "%#v\n", version.Get())
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), version.Get().String())
				}
				return nil
			}
			return manager.Run(cmd.Context(), o, known, nil)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
