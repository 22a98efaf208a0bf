package netproxy

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/testenv"
)

// upstreamAgentMetrics are upstream's agent metric families (ANP v0.34.0
// pkg/agent/metrics/metrics.go, stream metrics from konnectivity-client
// pkg/common/metrics) with their types and label names, sorted.
var upstreamAgentMetrics = map[string]family{
	"konnectivity_network_proxy_agent_dial_duration_seconds":           {"histogram", []string{}},
	"konnectivity_network_proxy_agent_server_connection_failure_count": {"counter", []string{"direction"}},
	"konnectivity_network_proxy_agent_endpoint_dial_failure_total":     {"counter", []string{"reason"}},
	"konnectivity_network_proxy_agent_open_server_connections":         {"gauge", []string{}},
	"konnectivity_network_proxy_agent_known_server_count":              {"gauge", []string{}},
	"konnectivity_network_proxy_agent_open_endpoint_connections":       {"gauge", []string{}},
	"konnectivity_network_proxy_agent_stream_packets_total":            {"counter", []string{"packet_type", "segment"}},
	"konnectivity_network_proxy_agent_stream_errors_total":             {"counter", []string{"code", "packet_type", "segment"}},
	"konnectivity_network_proxy_agent_lease_lists_total":               {"counter", []string{"http_response_code", "reason"}},
	"konnectivity_network_proxy_agent_lease_watches_total":             {"counter", []string{"http_response_code", "reason"}},
	"konnectivity_network_proxy_agent_lease_list_latency_seconds":      {"histogram", []string{"http_response_code"}},
	// Upstream serves the default registry: Go and process collectors.
	"go_goroutines":             {"gauge", []string{}},
	"go_memstats_alloc_bytes":   {"gauge", []string{}},
	"process_cpu_seconds_total": {"counter", []string{}},
	"process_open_fds":          {"gauge", []string{}},
}

// TestAgentMetricsAsUpstream scrapes a real `portside proxy-agent`'s
// /metrics after it counted Leases, carried a connection, failed a dial
// and lost its server (behind upstream's and Portside's server), and
// finds every upstream agent metric with upstream's type and label names,
// stream_packets_total with both segments; and every family upstream's
// own proxy-agent binary serves after the same steps.
func TestAgentMetricsAsUpstream(t *testing.T) {
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	var upstreamScrape map[string]family
	for _, combo := range []proxyCombo{{kindANP, kindANP}, {kindANP, kindPortside}, {kindPortside, kindPortside}} {
		t.Run(combo.String(), func(t *testing.T) {
			text := exerciseAgent(t, newFaultEnv(t, combo), cp.KubeconfigPath)
			fams := parseFamilies(t, text)
			if combo.agent == kindANP {
				upstreamScrape = fams
				return
			}
			for name, want := range upstreamAgentMetrics {
				if got, ok := fams[name]; !ok || got.String() != want.String() {
					t.Errorf("%s = %v (present %v), want upstream's %v", name, got, ok, want)
				}
			}
			for name, want := range upstreamScrape {
				if got, ok := fams[name]; !ok || got.String() != want.String() {
					t.Errorf("upstream's agent serves %s %v; Portside's: %v (present %v)", name, want, got, ok)
				}
			}
			for _, seg := range []string{"to_agent", "from_agent"} {
				if !strings.Contains(text, `konnectivity_network_proxy_agent_stream_packets_total{packet_type="DATA",segment="`+seg+`"}`) {
					t.Errorf("stream_packets_total has no DATA in segment %s", seg)
				}
			}
			if !strings.Contains(text, `konnectivity_network_proxy_agent_server_connection_failure_count{direction="from_server"}`) {
				t.Error("server_connection_failure_count has no direction=from_server after the server died")
			}
		})
	}
}

// exerciseAgent runs a server and an agent counting Leases; proxies an
// echo, a dial to a closed port and then kills the server; it returns the
// agent's /metrics.
func exerciseAgent(t *testing.T, e *faultEnv, kubeconfig string) string {
	t.Helper()
	cfg := e.serverConfig("m1", 1)
	server := e.startServer(cfg)
	agent := e.startAgent("metrics", cfg.AgentPort, "--count-server-leases", "--kubeconfig="+kubeconfig)
	agent.waitReady(t, 15*time.Second)
	server.waitReady(t, 15*time.Second)
	c, err := dialEcho(t, cfg.UDS, e.echo, "counted both ways")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	_ = l.Close()
	if c, err := dialEcho(t, cfg.UDS, refused, "refused"); err == nil {
		_ = c.Close()
		t.Fatalf("dial to %s succeeded", refused)
	}
	waitFor(t, 5*time.Second, "the agent to count the failed dial", func() bool {
		return strings.Contains(agent.metrics(t), "konnectivity_network_proxy_agent_endpoint_dial_failure_total{")
	})
	server.Kill()
	waitNotReady(t, agent, 10*time.Second)
	return agent.metrics(t)
}
