package netproxy_test

import (
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// An upstream agent on the mTLS agent port of a server offering
// portside-link/2 is served with gRPC, as before: it offers only h2.
func TestLinkPortServesUpstreamAgent(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	pki := netproxytest.NewPKI(t)
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s := netproxytest.StartServer(t, server.Options{UDSName: uds, AgentTLS: pki.ServerTLS(t)})
	startUpstreamAgent(t, s.AgentAddr().String(), credentials.NewTLS(pki.ClientTLS(t, "upstream-agent")))
	netproxytest.Eventually(t, 10*time.Second, s.Ready, "upstream agent connected")
	if n := s.LinkAgents(); n != 0 {
		t.Fatalf("%d upstream agents on portside-link/2, want 0", n)
	}
	manyEchoes(t, uds, echo, 32, 256<<10)
}

// A Portside agent offering the link to an upstream server over mTLS
// (which chooses h2) connects with gRPC at once, not after a failure.
func TestLinkAgentFallsBackToUpstreamServer(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	pki := netproxytest.NewPKI(t)
	agentAddr, uds := startUpstreamServer(t, grpc.Creds(credentials.NewTLS(pki.ServerTLS(t))))
	start := time.Now()
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: agentAddr, AgentID: "portside-agent",
		TLS: pki.ClientTLS(t, "portside-agent")})
	netproxytest.Eventually(t, 10*time.Second, func() bool { return len(a.ServerIDs()) == 1 }, "agent connected to the upstream server")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("connecting took %v: the fallback to gRPC should be immediate", took)
	}
	if n := a.Links(); n != 0 {
		t.Fatalf("agent on portside-link/2 with an upstream server")
	}
	if a.LastError() != nil {
		t.Errorf("the fallback left an error: %v", a.LastError())
	}
	manyEchoes(t, uds, echo, 32, 256<<10)
}

// --portside-link=false on either side means gRPC with streams-v1.
func TestLinkDisabled(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	for _, side := range []string{"server", "agent"} {
		t.Run(side, func(t *testing.T) {
			pki := netproxytest.NewPKI(t)
			uds := filepath.Join(t.TempDir(), "proxy.sock")
			s := netproxytest.StartServer(t, server.Options{UDSName: uds, AgentTLS: pki.ServerTLS(t), DisableLink: side == "server"})
			a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "a",
				TLS: pki.ClientTLS(t, "a"), DisableLink: side == "agent"})
			netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")
			assertProtocol(t, s, a, true)
			if a.Links() != 0 || s.LinkAgents() != 0 {
				t.Fatalf("link used with --portside-link=false on the %s", side)
			}
			manyEchoes(t, uds, echo, 8, 256<<10)
		})
	}
}
