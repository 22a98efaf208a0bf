package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/migrate"
)

func newMigrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move a cluster from an in-tree cloud provider to an external cloud controller manager",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newMigrateCheckCommand())
	return cmd
}

func newMigrateCheckCommand() *cobra.Command {
	var kubeconfig, kubeContext, output, writeDir string
	var kubeletTimeout, timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Report what moving to an external cloud controller manager needs",
		Long: "Inspect a cluster for leftovers of an in-tree cloud provider and for what an external CCM needs:\n" +
			"Nodes (providerID, beta labels, the uninitialized taint), control-plane flags (static pods' mirror pods),\n" +
			"kubelets (configz, best effort), in-tree volumes and StorageClasses (CSI drivers), LoadBalancer Services,\n" +
			"the CCM's RBAC (SubjectAccessReview as kube-system/cloud-controller-manager) and leases, CSI drivers\n" +
			"registered on every node (CSINode), and for leader migration: both components' access to the migration\n" +
			"Lease, kube-controller-manager's --leader-elect and --enable-leader-migration, upstream's procedure step by\n" +
			"step and the LeaderMigrationConfiguration files it uses. Each finding has its fix.\n\n" +
			"Exit status: 0 when READY (no blocking finding), 1 otherwise.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "text" && output != "json" {
				return fmt.Errorf("--output %q is not supported: use text or json", output)
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
			cfg, err := loader.ClientConfig()
			if err != nil {
				return fmt.Errorf("kubeconfig: %w", err)
			}
			cfg.Timeout = timeout
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			rep, err := migrate.Check(cmd.Context(), client, migrate.Options{Server: cfg.Host, KubeletTimeout: kubeletTimeout})
			if err != nil {
				return err
			}
			if writeDir != "" {
				paths, err := rep.LeaderMigration.Write(writeDir)
				if err != nil {
					return err
				}
				if output != "json" {
					for _, p := range paths {
						fmt.Fprintln(cmd.ErrOrStderr(), "wrote", p)
					}
				}
			}
			if err := migrate.Print(cmd.OutOrStdout(), rep, output); err != nil {
				return err
			}
			if !rep.Ready {
				return errExitCode
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&kubeContext, "context", "", "kubeconfig context (default: the current context)")
	f.StringVarP(&output, "output", "o", "text", "report format: text or json")
	f.StringVar(&writeDir, "write-leader-migration-config", "", "write the LeaderMigrationConfiguration files kcm.yaml and ccm.yaml into this directory")
	f.DurationVar(&kubeletTimeout, "kubelet-timeout", 5*time.Second, "how long to wait for each kubelet's configz through the node proxy")
	f.DurationVar(&timeout, "request-timeout", 30*time.Second, "timeout of each API request")
	return cmd
}
