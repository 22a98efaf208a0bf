// Package helmrelease installs, upgrades, rolls back and uninstalls a Helm
// release of a chart with Helm's own library (the actions `helm install`,
// `upgrade`, `rollback` and `uninstall` run), against the cluster of a
// kubeconfig. Releases are stored as Helm stores them (Secrets of type
// helm.sh/release.v1), so the helm CLI sees and manages them too.
package helmrelease

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/klog/v2"
)

// LoadChart reads a chart from files (Chart.yaml at the root), as
// `helm install ./dir` loads a directory; appVersion, when set, replaces
// the chart's (the image tag the chart defaults to).
func LoadChart(files fs.FS, appVersion string) (*chart.Chart, error) {
	var bufs []*loader.BufferedFile
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		bufs = append(bufs, &loader.BufferedFile{Name: path.Clean(p), Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	c, err := loader.LoadFiles(bufs)
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	if appVersion != "" {
		c.Metadata.AppVersion = appVersion
	}
	return c, nil
}

// Client runs Helm's actions in one namespace of one cluster.
type Client struct {
	cfg       *action.Configuration
	namespace string
}

// New returns a Client for the cluster of kubeconfig, releases in
// namespace. Helm's own log lines go to ctx's logger at V(2).
func New(ctx context.Context, kubeconfig, namespace string) (*Client, error) {
	logger := klog.FromContext(ctx).WithName("helm")
	cfg := new(action.Configuration)
	getter := kube.GetConfig(kubeconfig, "", namespace)
	if err := cfg.Init(getter, namespace, "secret", func(format string, v ...any) {
		logger.V(2).Info(fmt.Sprintf(format, v...))
	}); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return &Client{cfg: cfg, namespace: namespace}, nil
}

// Install is `helm install name chart -n namespace --values ... --wait
// --timeout timeout`: it waits until the release's Deployments and
// DaemonSets are rolled out and its pods ready.
func (c *Client) Install(ctx context.Context, name string, ch *chart.Chart, values map[string]any, timeout time.Duration) (*release.Release, error) {
	in := action.NewInstall(c.cfg)
	in.ReleaseName, in.Namespace = name, c.namespace
	in.Wait, in.Timeout = true, timeout
	rel, err := in.RunWithContext(ctx, ch, values)
	if err != nil {
		return rel, fmt.Errorf("helm install %s: %w", name, err)
	}
	return rel, nil
}

// Upgrade is `helm upgrade name chart --values ... --wait`; with
// reuseValues (`--reuse-values`) values are merged over the last
// release's, else they are the release's whole values.
func (c *Client) Upgrade(ctx context.Context, name string, ch *chart.Chart, values map[string]any, reuseValues bool, timeout time.Duration) (*release.Release, error) {
	up := action.NewUpgrade(c.cfg)
	up.Namespace = c.namespace
	up.Wait, up.Timeout, up.ReuseValues = true, timeout, reuseValues
	rel, err := up.RunWithContext(ctx, name, ch, values)
	if err != nil {
		return rel, fmt.Errorf("helm upgrade %s: %w", name, err)
	}
	return rel, nil
}

// Rollback is `helm rollback name revision --wait` (0: the previous).
func (c *Client) Rollback(name string, revision int, timeout time.Duration) error {
	rb := action.NewRollback(c.cfg)
	rb.Version, rb.Wait, rb.Timeout = revision, true, timeout
	if err := rb.Run(name); err != nil {
		return fmt.Errorf("helm rollback %s %d: %w", name, revision, err)
	}
	return nil
}

// Uninstall is `helm uninstall name --wait`.
func (c *Client) Uninstall(name string, timeout time.Duration) error {
	un := action.NewUninstall(c.cfg)
	un.Wait, un.Timeout = true, timeout
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", name, err)
	}
	return nil
}

// Status is the release's last revision (`helm status`).
func (c *Client) Status(name string) (*release.Release, error) {
	return action.NewStatus(c.cfg).Run(name)
}
