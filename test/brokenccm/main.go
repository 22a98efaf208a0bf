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
// With $PORTSIDE_BROKEN_SINCE set to a Kubernetes minor version (e.g.
// v1.37), what the file lists breaks only when the cluster's
// kube-apiserver is that version or newer, as a provider broken by a
// change in Kubernetes would be: the last-known-good matrix (test/lkg)
// shows it passing on the older releases and failing from that one on.
//
// It takes `portside up --ccm-binary`'s flags (upstream's, no "ccm"
// subcommand) and serves as provider "local".
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

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
	if since := os.Getenv("PORTSIDE_BROKEN_SINCE"); since != "" {
		on, err := serverAtLeast(args, since)
		if err != nil {
			fmt.Fprintf(os.Stderr, "brokenccm: PORTSIDE_BROKEN_SINCE=%s: %v\n", since, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "brokenccm: kube-apiserver is %s v%s: breaking what $PORTSIDE_BROKEN_FILE lists: %v\n",
			map[bool]string{true: "at least", false: "older than"}[on], since[1:], on)
		versionBreaks = on
	}
	os.Exit(cli.Execute())
}

// versionBreaks is false when PORTSIDE_BROKEN_SINCE is newer than the
// cluster: nothing breaks.
var versionBreaks = true

// serverAtLeast asks the kube-apiserver of args' --kubeconfig whether it
// is at least version since (major.minor).
func serverAtLeast(args []string, since string) (bool, error) {
	want, err := version.ParseGeneric(since)
	if err != nil {
		return false, err
	}
	var kubeconfig string
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			kubeconfig = v
		} else if a == "--kubeconfig" && i+1 < len(args) {
			kubeconfig = args[i+1]
		}
	}
	if kubeconfig == "" {
		return false, fmt.Errorf("no --kubeconfig among the flags to ask kube-apiserver's version with")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	info, err := c.Discovery().ServerVersion()
	if err != nil {
		return false, err
	}
	got, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		return false, err
	}
	return got.AtLeast(version.MajorMinor(want.Major(), want.Minor())), nil
}

// breaks says whether what is broken right now.
func breaks(what string) bool {
	if !versionBreaks {
		return false
	}
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
