package netproxy_test

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	anpagent "sigs.k8s.io/apiserver-network-proxy/pkg/agent"
	anpserver "sigs.k8s.io/apiserver-network-proxy/pkg/server"
	"sigs.k8s.io/apiserver-network-proxy/pkg/server/proxystrategies"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// In-process interop with upstream's v0.34.0 packages; the binaries are
// covered by test/integration/netproxy.

func manyEchoes(t *testing.T, uds, echo string, n, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialUDS(ctx, uds, echo)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if err := roundTrip(c, size); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestInteropUpstreamAgent(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s := netproxytest.StartServer(t, server.Options{UDSName: uds})
	startUpstreamAgent(t, s.AgentAddr().String(), insecure.NewCredentials())
	netproxytest.Eventually(t, 10*time.Second, s.Ready, "upstream agent connected")
	// An upstream agent never asks for streams-v1; the server must not
	// have assumed it.
	if n := s.StreamsV1Agents(); n != 0 {
		t.Fatalf("%d upstream agents on streams-v1, want 0", n)
	}
	manyEchoes(t, uds, echo, 32, 256<<10)
}

func TestInteropUpstreamServer(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	agentAddr, uds := startUpstreamServer(t)
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: agentAddr, AgentID: "portside-agent"})
	netproxytest.Eventually(t, 10*time.Second, func() bool { return len(a.ServerIDs()) == 1 }, "agent connected to the upstream server")
	// An upstream server never answers the streams-v1 offer: the agent
	// speaks upstream's protocol.
	if v1, held := a.StreamsV1(); v1 != 0 || held != 1 {
		t.Fatalf("agent on streams-v1 with %d of %d upstream servers, want 0 of 1", v1, held)
	}
	manyEchoes(t, uds, echo, 32, 256<<10)
}

// startUpstreamAgent runs upstream's agent (v0.34.0's package) against a
// server's agent port.
func startUpstreamAgent(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	stop := make(chan struct{})
	cfg := &anpagent.ClientSetConfig{Address: addr, AgentID: "upstream-agent",
		SyncInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond, SyncIntervalCap: time.Second,
		DialOptions:    []grpc.DialOption{grpc.WithTransportCredentials(creds)},
		XfrChannelSize: 150, ServerCountSource: "default"}
	cs := cfg.NewAgentClientSet(make(chan struct{}), stop)
	cs.SetServerCounter(anpagent.NewAggregateServerCounter(nil, anpagent.NewResponseBasedCounter(cs), "default"))
	cs.Serve()
	t.Cleanup(func() { close(stop) })
}

// startUpstreamServer runs upstream's server (v0.34.0's package): its
// agent port (with agentOpts, e.g. TLS credentials) and its frontend on a
// unix socket.
func startUpstreamServer(t *testing.T, agentOpts ...grpc.ServerOption) (agentAddr, uds string) {
	t.Helper()
	strategies, _ := proxystrategies.ParseProxyStrategies("default")
	ps := anpserver.NewProxyServer("upstream-server", strategies, 1, &anpserver.AgentTokenAuthenticationOptions{}, 10)
	agentLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uds = filepath.Join(t.TempDir(), "proxy.sock")
	feLn, err := net.Listen("unix", uds)
	if err != nil {
		t.Fatal(err)
	}
	agentSrv, feSrv := grpc.NewServer(agentOpts...), grpc.NewServer()
	agentpb.RegisterAgentServiceServer(agentSrv, ps)
	client.RegisterProxyServiceServer(feSrv, ps)
	go func() { _ = agentSrv.Serve(agentLn) }()
	go func() { _ = feSrv.Serve(feLn) }()
	t.Cleanup(func() { feSrv.Stop(); agentSrv.Stop() })
	return agentLn.Addr().String(), uds
}
