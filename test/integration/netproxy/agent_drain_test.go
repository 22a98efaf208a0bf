package netproxy

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

const readyBackends = "konnectivity_network_proxy_server_ready_backend_connections"

// TestAgentRollingRestart: an exec-style tunnel, long-lived and carrying
// data, survives a rolling restart of both agents (Portside's, behind
// Portside's and upstream's server). SIGTERM drains as upstream's agent:
// DRAIN to the servers, the open tunnel kept, with no drain timeout set,
// until it ends; then the agent exits at once. Portside's server sends a
// draining agent no new dials (upstream's still may; the agent serves
// them). A second SIGTERM ends a drain at once.
func TestAgentRollingRestart(t *testing.T) {
	for _, combo := range []proxyCombo{{kindPortside, kindPortside}, {kindANP, kindPortside}} {
		t.Run(combo.String(), func(t *testing.T) {
			e := newFaultEnv(t, combo)
			cfg := e.serverConfig("s1", 1)
			server := e.startServer(cfg)
			a1 := e.startAgent("node1", cfg.AgentPort)
			a1.waitReady(t, 15*time.Second)
			waitMetric(t, server, readyBackends, 1, 10*time.Second)
			// The only agent carries the long-lived tunnel.
			tunnel, err := dialEcho(t, cfg.UDS, e.echo, "exec: before the restart")
			if err != nil {
				t.Fatal(err)
			}
			a2 := e.startAgent("node2", cfg.AgentPort)
			a2.waitReady(t, 15*time.Second)
			waitMetric(t, server, readyBackends, 2, 10*time.Second)

			// Node 1's pod is replaced: the old agent drains, a new one
			// with the same ID starts beside it.
			began := time.Now()
			sigterm(t, a1)
			// (Its own log: the ID given last wins.)
			a1new := e.startAgent("node1-new", cfg.AgentPort, "--agent-id=node1")
			a1new.waitReady(t, 15*time.Second)
			// Upstream's server counts agents by ID, Portside's connections.
			want := 3.0
			if combo.server == kindANP {
				want = 2
			}
			waitMetric(t, server, readyBackends, want, 10*time.Second)
			if err := echoOnce(tunnel, "exec: while node1's old agent drains", 5*time.Second); err != nil {
				t.Fatalf("tunnel during the drain: %v", err)
			}
			var fresh []net.Conn
			for i := range 4 {
				c, err := dialEcho(t, cfg.UDS, e.echo, fmt.Sprintf("new dial %d", i))
				if err != nil {
					t.Fatalf("new dial %d while node1's old agent drains: %v", i, err)
				}
				fresh = append(fresh, c)
			}
			if combo.server == kindPortside {
				if got := metricValue(a1.metrics(t), "konnectivity_network_proxy_agent_open_endpoint_connections"); got != 1 {
					t.Errorf("draining agent holds %v connections, want only the tunnel (no new dials to a draining agent)", got)
				}
			}
			for _, c := range fresh {
				_ = c.Close()
			}
			waitMetric(t, a2, "konnectivity_network_proxy_agent_open_endpoint_connections", 0, 10*time.Second)

			// Node 2's pod is replaced: nothing open, so it exits at once.
			sigterm(t, a2)
			select {
			case <-a2.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("node2's agent, with no connection open, still running 5s after SIGTERM")
			}
			a2new := e.startAgent("node2-new", cfg.AgentPort, "--agent-id=node2")
			a2new.waitReady(t, 15*time.Second)
			if err := echoOnce(tunnel, "exec: after both restarts", 5*time.Second); err != nil {
				t.Fatalf("tunnel after both restarts: %v", err)
			}
			select {
			case <-a1.Done():
				t.Fatalf("node1's old agent exited %v after SIGTERM with the tunnel open", time.Since(began))
			default:
			}
			_ = tunnel.Close()
			select {
			case <-a1.Done():
				t.Logf("node1's old agent exited %v after SIGTERM, once the tunnel closed", time.Since(began).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatal("node1's old agent still running 5s after its tunnel closed")
			}

			// A second signal ends a drain with a tunnel open.
			open, err := dialEcho(t, cfg.UDS, e.echo, "exec: stopped by a second signal")
			if err != nil {
				t.Fatal(err)
			}
			holder := a1new
			if metricValue(a2new.metrics(t), "konnectivity_network_proxy_agent_open_endpoint_connections") == 1 {
				holder = a2new
			}
			sigterm(t, holder)
			time.Sleep(300 * time.Millisecond)
			select {
			case <-holder.Done():
				t.Fatal("the agent exited on the first signal with a tunnel open")
			default:
			}
			sigterm(t, holder)
			select {
			case <-holder.Done():
			case <-time.After(3 * time.Second):
				t.Fatal("the agent still running 3s after a second signal")
			}
			if err := echoOnce(open, "after the agent stopped", 5*time.Second); err == nil {
				t.Error("the tunnel still carries data after its agent was stopped")
			}
		})
	}
}

func sigterm(t *testing.T, p *proxyProc) {
	t.Helper()
	if err := syscall.Kill(p.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}
