package server

import (
	"errors"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// identityOptions sets up how agents prove who they are (TokenReviews) and
// what the server checks their claims against (Nodes).
func (f *Flags) identityOptions(o *Options, logger logr.Logger) error {
	// As upstream, any of the three turns token authentication on, and it
	// needs all three.
	if f.AgentNamespace != "" || f.AgentServiceAccount != "" || f.AuthAudience != "" {
		var missing []string
		for _, m := range []struct{ flag, v string }{{"--agent-namespace", f.AgentNamespace},
			{"--agent-service-account", f.AgentServiceAccount}, {"--authentication-audience", f.AuthAudience}} {
			if m.v == "" {
				missing = append(missing, m.flag)
			}
		}
		if len(missing) > 0 {
			return errors.New("agent token authentication needs --agent-namespace, --agent-service-account and --authentication-audience (the audience of the agents' projected tokens, e.g. system:konnectivity-server); missing " + strings.Join(missing, ", "))
		}
		cs, err := f.kubeClient()
		if err != nil {
			return err
		}
		rcfg, err := f.reviewConfig()
		if err != nil {
			return err
		}
		rcs, err := kubernetes.NewForConfig(rcfg)
		if err != nil {
			return err
		}
		o.TokenAuth = &TokenAuth{Namespace: f.AgentNamespace, ServiceAccount: f.AgentServiceAccount,
			Audience: f.AuthAudience, Client: rcs, MaxInFlight: f.ReviewMaxInFlight, Timeout: f.ReviewTimeout,
			CacheTTL: f.ReviewCacheTTL, DenialTTL: f.ReviewDenialTTL}
		o.NodeClient = cs
	} else if f.Kubeconfig != "" || inCluster() {
		cs, err := f.kubeClient()
		if err != nil {
			return err
		}
		o.NodeClient = cs
	} else {
		logger.Info("No --kubeconfig and not in a cluster: Nodes cannot be read, so agents keep only the identifiers --allow-route-claims grants them")
	}
	for _, r := range f.AllowRouteClaims {
		if strings.TrimSpace(r) == "" {
			return errors.New("--allow-route-claims has an empty entry; list users or groups, comma-separated")
		}
	}
	o.RouteClaims = f.AllowRouteClaims
	return nil
}

func inCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}
