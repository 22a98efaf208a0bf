package devenv

import (
	"context"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/tools"
)

// InstallPrepare does what an install of the chart needs (the image
// pushed, the Secrets and ConfigMap its pods mount, the values `up` would
// install with, written to a file) and runs no CCM: the operator installs
// the chart with their own Helm, or first runs the cloud controllers the
// way a cluster being migrated does (a kube-controller-manager of version
// N; docs/install.md's migration). Until a CCM runs, the nodes keep the
// taint node.cloudprovider.kubernetes.io/uninitialized, so neither the
// demo nor cluster DNS is deployed; kube-controller-manager allocates the
// pod CIDRs (node IPAM as version N had it), so the values leave node
// IPAM off in the CCM.
const InstallPrepare = "prepare"

// ChartValuesFile is where --install=prepare writes the chart's values.
func ChartValuesFile(dataDir string) string { return filepath.Join(dataDir, "chart-values.yaml") }

// chartAgents reports whether the nodes' network proxy agents are a
// DaemonSet (the chart's, installed by up or, with prepare, by the
// operator; or deploy/network-proxy's with manifests) rather than processes
// of each machine.
func (env *environment) chartAgents() bool {
	return env.install == InstallChart || env.install == InstallPrepare || env.install == InstallManifests
}

// prepareChart replaces startCCM with --install=prepare.
func prepareChart(ctx context.Context, s *stack, env *environment) error {
	values, _, err := preparedChartValues(ctx, s, env)
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	file := ChartValuesFile(env.dir)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	root, err := tools.RepoRoot()
	chart := filepath.Join(root, "deploy", "helm", "portside")
	if err != nil {
		chart = "deploy/helm/portside"
	}
	s.p.step("ccm", "no CCM runs (--install=%s): the nodes stay tainted node.cloudprovider.kubernetes.io/uninitialized until one does; kube-controller-manager allocates the pod CIDRs", InstallPrepare)
	s.p.step("ccm", "install the chart with: helm install %s %s -n %s -f %s", ChartRelease, chart, ChartNamespace, file)
	return nil
}

// installRunsCCM says, for --install, whether up waits for initialized
// nodes and deploys cluster DNS and the demo: not when no CCM runs.
func installRunsCCM(install string) bool { return install != InstallPrepare }
