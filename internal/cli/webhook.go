package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/pkg/cloud"
)

func newWebhookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Serve the cloud provider's admission webhooks",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newWebhookServeCommand())
	return cmd
}

func newWebhookServeCommand() *cobra.Command {
	var provider, cloudConfig string
	o := manager.NewStandaloneWebhookOptions()
	var names []string
	for _, w := range manager.DefaultWebhooks() {
		names = append(names, w.Name+" ("+w.Path+")")
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the admission webhooks alone, without the cloud controller manager",
		Long: "Serve Portside's admission webhooks over HTTPS with a registered cloud provider, as `portside ccm --webhooks`\n" +
			"does, without the controllers and without a cluster connection: the apiserver calls it through a\n" +
			"ValidatingWebhookConfiguration or MutatingWebhookConfiguration. It runs until SIGTERM.\n\n" +
			"Registered providers: " + strings.Join(cloud.Registered(), ", ") + "\n" +
			"Webhooks: " + strings.Join(names, "; "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []string
			if provider == "" {
				errs = append(errs, "--cloud-provider is required")
			}
			errs = append(errs, o.Validate()...)
			if len(errs) > 0 {
				return errors.New(strings.Join(errs, "; "))
			}
			ctx := cmd.Context()
			p, err := cloud.New(ctx, provider, cloudConfig)
			if err != nil {
				return err
			}
			// No metrics registry: this command serves no /metrics.
			addr, errc, err := o.ServeWebhooks(ctx, p, nil)
			if err != nil {
				return err
			}
			if addr == "" {
				return fmt.Errorf("--webhooks=%s enables no webhook", strings.Join(o.Webhooks, ","))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Serving webhooks on https://%s\n", addr)
			// nil when ctx ends (the server shut down), else its error.
			return <-errc
		},
	}
	fs := cmd.Flags()
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	fs.StringVar(&provider, "cloud-provider", provider, "the provider the webhooks ask (one of the registered providers listed above)")
	fs.StringVar(&cloudConfig, "cloud-config", cloudConfig, "the provider's configuration file")
	o.AddFlags(fs)
	return cmd
}
