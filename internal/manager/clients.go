package manager

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/clientbuilder"
)

// clients are the CCM's apiserver clients: writes and reads with a
// whole-request timeout, and watches without one. With
// --use-service-account-credentials, each controller gets a client of its
// own ServiceAccount in kube-system, as upstream's CCM gives them
// (node-controller, service-controller, route-controller), through
// upstream's client builder (TokenRequest tokens, refreshed). Without it,
// each controller still gets a client of its own, and so its own
// --kube-api-qps budget, as under upstream's CCM: one busy controller (a
// burst of joining nodes) does not queue another's writes.
type clients struct {
	cfg           *rest.Config
	write, watch  kubernetes.Interface
	perController clientbuilder.ControllerClientBuilder
}

func newClients(cfg *rest.Config, useServiceAccounts bool) (clients, error) {
	write, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return clients{}, err
	}
	// Informers watch for minutes: a whole-request timeout would cut every
	// watch after it and relist. Their client has none; the apiserver ends
	// watches itself, and HTTP/2 health checks catch dead connections.
	watchCfg := rest.CopyConfig(cfg)
	watchCfg.Timeout = 0
	watch, err := kubernetes.NewForConfig(watchCfg)
	if err != nil {
		return clients{}, err
	}
	cs := clients{cfg: cfg, write: write, watch: watch}
	if useServiceAccounts {
		cs.perController = clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(cfg), write.CoreV1(), metav1.NamespaceSystem)
	}
	return cs, nil
}

// forController returns the client a controller writes with: its
// ServiceAccount's with --use-service-account-credentials, else one with
// the CCM's credentials and a rate limiter of its own.
func (cs clients) forController(c Controller) (kubernetes.Interface, error) {
	if c.ClientName == "" {
		return cs.write, nil
	}
	if cs.perController == nil {
		return kubernetes.NewForConfig(cs.cfg)
	}
	client, err := cs.perController.Client(c.ClientName)
	if err != nil {
		return nil, fmt.Errorf("client of ServiceAccount kube-system/%s (--use-service-account-credentials): %w", c.ClientName, err)
	}
	return client, nil
}

// useServiceAccountCredentials is --use-service-account-credentials.
func useServiceAccountCredentials(o *Options) bool { return o.UseServiceAccountCredentials }

// restConfig builds the client configuration: --kubeconfig or in-cluster,
// protobuf on the wire, and the QPS limits.
func restConfig(o *Options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			err = fmt.Errorf("no --kubeconfig and not running in a cluster: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "portside-ccm"
	cfg.Timeout = 30 * time.Second
	return cfg, nil
}
