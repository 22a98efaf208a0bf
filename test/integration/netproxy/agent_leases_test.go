package netproxy

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/testenv"
)

// TestAgentCountsServerLeases: three upstream proxy-servers behind one
// address publish Leases (--enable-lease-controller) but each tells agents
// --server-count=1, as a fleet counting Leases is configured. Portside's
// agent with upstream's --count-server-leases and --lease-label-selector
// holds exactly one connection to each of the three: every server counts
// one ready backend (its own /metrics, not the agent's view).
func TestAgentCountsServerLeases(t *testing.T) {
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	e := newFaultEnv(t, proxyCombo{server: kindANP, agent: kindPortside})
	// A label of this run's own: Leases of other runs in the namespace
	// (still valid for 30 s) are not counted.
	run := fmt.Sprintf("r%08x", rand.Uint32())
	var servers []*proxyProc
	var backends []string
	for i := range 3 {
		cfg := e.serverConfig(fmt.Sprintf("lease%d-%s", i, run), 1)
		cfg.Extra = []string{"--enable-lease-controller", "--kubeconfig=" + cp.KubeconfigPath,
			"--lease-label=k8s-app=konnectivity-server,portside-test=" + run}
		servers = append(servers, e.startServer(cfg))
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", cfg.AgentPort))
	}
	lb := startForwarder(t, backends...)
	agent := e.startAgent("leases", lb.port, "--count-server-leases", "--kubeconfig="+cp.KubeconfigPath,
		"--lease-label-selector=portside-test="+run)
	agent.waitReady(t, 15*time.Second)
	for _, s := range servers {
		waitMetric(t, s, "konnectivity_network_proxy_server_ready_backend_connections", 1, 30*time.Second)
	}
	waitMetric(t, agent, "konnectivity_network_proxy_agent_known_server_count", 3, 5*time.Second)
	waitMetric(t, agent, "konnectivity_network_proxy_agent_open_server_connections", 3, 5*time.Second)
	// And it stays at one each: no server gets a second connection.
	time.Sleep(2 * time.Second)
	for _, s := range servers {
		if got := metricValue(s.metrics(t), "konnectivity_network_proxy_server_ready_backend_connections"); got != 1 {
			t.Errorf("%s has %v backend connections, want 1", s.LogPath, got)
		}
	}
	if got := metricValue(agent.metrics(t), `konnectivity_network_proxy_agent_lease_lists_total{http_response_code="200",reason=""}`); got < 1 {
		t.Errorf("agent lease_lists_total{200} = %v, want at least 1", got)
	}
}
