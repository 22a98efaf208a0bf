package netproxy_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	anpagent "sigs.k8s.io/apiserver-network-proxy/pkg/agent"
	anpserver "sigs.k8s.io/apiserver-network-proxy/pkg/server"
	"sigs.k8s.io/apiserver-network-proxy/pkg/server/proxystrategies"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"

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
	stop := make(chan struct{})
	cfg := &anpagent.ClientSetConfig{Address: s.AgentAddr().String(), AgentID: "upstream-agent",
		SyncInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond, SyncIntervalCap: time.Second,
		DialOptions:    []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(t, "upstream-agent")))},
		XfrChannelSize: 150, ServerCountSource: "default"}
	cs := cfg.NewAgentClientSet(make(chan struct{}), stop)
	cs.SetServerCounter(anpagent.NewAggregateServerCounter(nil, anpagent.NewResponseBasedCounter(cs), "default"))
	cs.Serve()
	t.Cleanup(func() { close(stop) })
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
	strategies, _ := proxystrategies.ParseProxyStrategies("default")
	ps := anpserver.NewProxyServer("upstream-server", strategies, 1, &anpserver.AgentTokenAuthenticationOptions{}, 10)
	agentLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	feLn, err := net.Listen("unix", uds)
	if err != nil {
		t.Fatal(err)
	}
	agentSrv, feSrv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLS(t)))), grpc.NewServer()
	agentpb.RegisterAgentServiceServer(agentSrv, ps)
	client.RegisterProxyServiceServer(feSrv, ps)
	go func() { _ = agentSrv.Serve(agentLn) }()
	go func() { _ = feSrv.Serve(feLn) }()
	t.Cleanup(func() { feSrv.Stop(); agentSrv.Stop() })

	start := time.Now()
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: agentLn.Addr().String(), AgentID: "portside-agent",
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

// Token authentication is the gRPC link's on the link: a refused token
// reaches the agent as the server's reason, a good one is accepted.
func TestLinkTokenAuthentication(t *testing.T) {
	cs := fake.NewSimpleClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview)
		if tr.Spec.Token != "good-token" {
			return true, &authv1.TokenReview{}, nil
		}
		return true, &authv1.TokenReview{Status: authv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authv1.UserInfo{Username: "system:serviceaccount:kube-system:konnectivity-agent"}}}, nil
	})
	echo := netproxytest.Listen(t, netproxytest.Echo)
	pki := netproxytest.NewPKI(t)
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s := netproxytest.StartServer(t, server.Options{UDSName: uds, AgentTLS: pki.ServerTLS(t), TokenAuth: &server.TokenAuth{
		Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: "system:konnectivity-server", Client: cs}})
	dir := t.TempDir()
	write := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "bad",
		TLS: pki.ClientTLS(t, "bad"), ServiceAccountTokenPath: write("bad", "forged")})
	netproxytest.Eventually(t, 5*time.Second, func() bool { return bad.LastError() != nil }, "refusal")
	if err := bad.LastError(); !strings.Contains(err.Error(), "server refused the agent: Unauthenticated") {
		t.Errorf("refusal %q does not carry the server's reason", err)
	}
	if s.AgentCount() != 0 {
		t.Fatal("agent with a forged token was accepted")
	}
	good, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "good",
		TLS: pki.ClientTLS(t, "good"), ServiceAccountTokenPath: write("good", "good-token")})
	netproxytest.Eventually(t, 5*time.Second, good.Ready, "agent with a good token connected")
	assertLink(t, s, good)
	manyEchoes(t, uds, echo, 8, 64<<10)
}
