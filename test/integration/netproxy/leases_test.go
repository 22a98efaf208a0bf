package netproxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/testenv"
)

// TestServerCountFromLeases: two Portside servers with
// --enable-lease-controller and --server-count=1 publish their Leases in a
// real kube-apiserver and tell agents (Portside's and upstream's) that
// there are 2 of them: an agent behind one address holds both. A server
// stopped with SIGTERM deletes its Lease at once.
func TestServerCountFromLeases(t *testing.T) {
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	leases := func() map[string]bool {
		list, err := client.CoordinationV1().Leases("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=konnectivity-server"})
		out := map[string]bool{}
		if err == nil {
			for _, l := range list.Items {
				out[l.Name] = true
			}
		}
		return out
	}
	for _, combo := range []proxyCombo{{kindPortside, kindPortside}, {kindPortside, kindANP}} {
		t.Run(combo.String(), func(t *testing.T) {
			e := newFaultEnv(t, combo)
			withLeases := func(id string) serverConfig {
				cfg := e.serverConfig(id, 1)
				cfg.Extra = []string{"--enable-lease-controller", "--kubeconfig=" + cp.KubeconfigPath}
				return cfg
			}
			idA, idB := "lease-a-"+string(combo.agent), "lease-b-"+string(combo.agent)
			cfgA, cfgB := withLeases(idA), withLeases(idB)
			_, serverB := e.startServer(cfgA), e.startServer(cfgB)
			testenv.Eventually(t, 20*time.Second, "both servers' Leases", func() (bool, string) {
				l := leases()
				return l["konnectivity-proxy-server-"+idA] && l["konnectivity-proxy-server-"+idB], fmt.Sprint(l)
			})
			lb := startForwarder(t, fmt.Sprintf("127.0.0.1:%d", cfgA.AgentPort), fmt.Sprintf("127.0.0.1:%d", cfgB.AgentPort))
			agent := e.startAgent("a1", lb.port)
			agent.waitReady(t, 15*time.Second)
			waitMetric(t, agent, "konnectivity_network_proxy_agent_open_server_connections", 2, 15*time.Second)

			serverB.stop()
			testenv.Eventually(t, 10*time.Second, "the stopped server's Lease deleted", func() (bool, string) {
				l := leases()
				return !l["konnectivity-proxy-server-"+idB] && l["konnectivity-proxy-server-"+idA], fmt.Sprint(l)
			})
		})
	}
}
