// Command brokenccm is Portside's CCM with a deliberately broken provider,
// for the conformance suite's own test: the local provider, except that
// what the file $PORTSIDE_BROKEN_FILE lists (comma-separated; read at
// every call, so an environment can start healthy and break later) is
// broken:
//
//   - zones: instances report a wrong zone ("wrong-<zone>");
//   - lb-backends: load balancers never get backends;
//   - routes: routes are reported created but never are.
//
// It takes `portside up --ccm-binary`'s flags (upstream's, no "ccm"
// subcommand) and serves as provider "local".
package main

import (
	"context"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/providers/local"
)

const name = "broken-local"

func main() {
	cloud.MustRegister(name, func(_ context.Context, config io.Reader) (cloud.Provider, error) {
		p, err := local.NewFromReader(config)
		if err != nil {
			return nil, err
		}
		return broken{p}, nil
	})
	args := []string{os.Args[0], "ccm"}
	for _, a := range os.Args[1:] {
		if a == "--cloud-provider="+local.ProviderName {
			a = "--cloud-provider=" + name
		}
		args = append(args, a)
	}
	os.Args = args
	os.Exit(cli.Execute())
}

// breaks says whether what is broken right now.
func breaks(what string) bool {
	data, err := os.ReadFile(os.Getenv("PORTSIDE_BROKEN_FILE"))
	if err != nil {
		return false
	}
	for _, w := range strings.Split(strings.TrimSpace(string(data)), ",") {
		if strings.TrimSpace(w) == what {
			return true
		}
	}
	return false
}

type broken struct{ *local.Provider }

// ProviderName stays "local": providerIDs are the local cloud's.
func (b broken) Instances() (cloud.Instances, bool) {
	i, ok := b.Provider.Instances()
	return brokenInstances{i}, ok
}

func (b broken) LoadBalancers() (cloud.LoadBalancers, bool) {
	l, ok := b.Provider.LoadBalancers()
	return brokenLBs{l}, ok
}

func (b broken) Routes() (cloud.Routes, bool) {
	r, ok := b.Provider.Routes()
	return brokenRoutes{r}, ok
}

type brokenInstances struct{ cloud.Instances }

func (i brokenInstances) InstanceMetadata(ctx context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	md, err := i.Instances.InstanceMetadata(ctx, n)
	if err == nil && breaks("zones") {
		md.Zone = "wrong-" + md.Zone
	}
	return md, err
}

type brokenLBs struct{ cloud.LoadBalancers }

func (l brokenLBs) EnsureLoadBalancer(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) (*corev1.LoadBalancerStatus, error) {
	if breaks("lb-backends") {
		hosts = nil
	}
	return l.LoadBalancers.EnsureLoadBalancer(ctx, spec, hosts)
}

func (l brokenLBs) UpdateLoadBalancerHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	if breaks("lb-backends") {
		hosts = nil
	}
	return l.LoadBalancers.UpdateLoadBalancerHosts(ctx, spec, hosts)
}

type brokenRoutes struct{ cloud.Routes }

func (r brokenRoutes) CreateRoute(ctx context.Context, cluster, nameHint string, route cloud.Route) error {
	if breaks("routes") {
		return nil
	}
	return r.Routes.CreateRoute(ctx, cluster, nameHint, route)
}
