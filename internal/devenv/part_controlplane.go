package devenv

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// environment is what the started parts tell the later ones.
type environment struct {
	layout
	restConfig *rest.Config
	client     kubernetes.Interface
	kubectl    string

	cloudClient   *client.Client
	cloudEndpoint string
	vipPool       netip.Prefix
	// registryHost is the cloud's OCI registry (host:port).
	registryHost string
	// webhookURL is where the apiserver calls persistent-volume-label (the
	// first CCM replica); "" when the CCM serves no webhook.
	webhookURL string
	// ccmBinary replaces `portside ccm` (Options.CCMBinary).
	ccmBinary string
	// install is Options.Install: with InstallChart the nodes' network
	// proxy agents are the chart's DaemonSet, not their machines'.
	install string

	nodes []nodeInfo
	// ccm are the supervised CCM replicas; ccmReplicas how many to run.
	ccm         []*supervisor
	ccmReplicas int
	// controlPlaneExit names which of etcd and kube-apiserver died.
	controlPlaneExit func() string
	// cp issues certificates of the control plane's CA (kubelets, proxy).
	cp *controlplane.ControlPlane
	// webhookClient is the certificate kube-apiserver presents to the
	// CCM's webhook, and its CA, which the webhook requires.
	webhookClient webhookClient

	// realNodes: the nodes are real machines of the cloud, in its VPC
	// realNet.
	realNodes bool
	realNet   realNetwork
	// dual: --ip-family=dual (real nodes only): the VPC, instances, pod
	// and Service ranges have both families. ipv6Only: --ip-family=ipv6
	// (real nodes): the VPC and instances are dual-stack, the cluster's
	// node IPs, pods, Services and load balancers IPv6 only.
	dual, ipv6Only bool

	// networkProxy: kube-apiserver's cluster egress goes through
	// proxy-server and per-zone agents (netproxyState says where).
	networkProxy  bool
	netproxyState *netproxyState
	// netproxyBinaries is Options.NetworkProxyBinaries: upstream's
	// proxy-server and proxy-agent instead of Portside's.
	netproxyBinaries string
}

// podCIDR and serviceCIDR are the environment's ranges: real nodes' are
// chosen per environment (realNetwork), simulated nodes' are fixed.
func (env *environment) podCIDR() string {
	if env.realNodes && env.ipv6Only && env.realNet.Pods6.IsValid() {
		return env.realNet.Pods6.String()
	}
	if env.realNodes && env.realNet.Pods.IsValid() {
		return dualList(env.realNet.Pods.String(), env.realNet.Pods6, env.dual)
	}
	return ClusterCIDR
}

func (env *environment) serviceCIDR() string {
	if env.realNodes && env.ipv6Only && env.realNet.Services6.IsValid() {
		return env.realNet.Services6.String()
	}
	if env.realNodes && env.realNet.Services.IsValid() {
		return dualList(env.realNet.Services.String(), env.realNet.Services6, env.dual)
	}
	return ServiceCIDR
}

// startControlPlane starts etcd and kube-apiserver from `make tools`, with
// durable state, and writes the admin kubeconfig.
func startControlPlane(ctx context.Context, s *stack, env *environment) error {
	binDir, err := tools.BinDir()
	if err != nil {
		return err
	}
	s.p.step("control plane", "starting etcd and kube-apiserver (state in %s)", env.controlPlane())
	opts := controlplane.Options{Dir: env.controlPlane(), BinDir: binDir, Durable: true, ServiceClusterIPRange: env.serviceCIDR()}
	if env.realNodes {
		// Real kubelets: TLS bootstrap, the Node authorizer, and the VPC
		// gateway (where they reach it) in the serving certificate.
		// Pods reach it by the kubernetes Service's ClusterIP
		// (publishAPIServerEndpoint), which their clients verify too.
		opts.RealNodes, opts.ExtraServingHosts = true, []string{env.realNet.gateway().String(), env.kubernetesServiceIP()}
		if env.vpc6() {
			opts.ExtraServingHosts = append(opts.ExtraServingHosts, env.realNet.gateway6().String())
		}
		// Webhooks and aggregated APIs behind a Service (the chart's
		// persistent-volume-label webhook) are dialed at an endpoint, a
		// pod's or node's address the network proxy's agents reach, not
		// at the ClusterIP, which only kube-proxy on a node serves (the
		// host routes no Service range: it is unreachable there).
		opts.ExtraAPIServerArgs = append(opts.ExtraAPIServerArgs, "--enable-aggregator-routing=true")
	}
	if env.networkProxy {
		opts.EgressSelections = env.egressSelections()
	}
	if env.webhookClient, err = writeWebhookClient(filepath.Join(env.controlPlane(), "webhook-client")); err != nil {
		return err
	}
	opts.ExtraAPIServerArgs = append(opts.ExtraAPIServerArgs, "--admission-control-config-file="+env.webhookClient.AdmissionConfigFile)
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return err
	}
	env.cp = cp
	pids := cp.PIDs()
	// Their death ends the environment (stack.exited), unlike the
	// supervised parts: see Up.
	exited, which := cp.Exited()
	s.push(fmt.Sprintf("kube-apiserver (pid %d) and etcd (pid %d)", pids["kube-apiserver"], pids["etcd"]), cp.Stop, exited)
	env.controlPlaneExit = which
	env.restConfig = cp.RESTConfig()
	env.client, err = kubernetes.NewForConfig(env.restConfig)
	if err != nil {
		return err
	}
	v, err := env.client.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	env.kubectl, _ = tools.Path(binDir, tools.Kubectl)
	s.p.step("control plane", "Kubernetes %s ready at %s (kube-apiserver pid %d, etcd pid %d)", v.GitVersion, cp.URL, pids["kube-apiserver"], pids["etcd"])
	return nil
}

// vpc6: the VPC and its instances are dual-stack (--ip-family dual or
// ipv6).
func (env *environment) vpc6() bool { return env.dual || env.ipv6Only }
