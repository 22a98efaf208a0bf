package netproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// sourceOrEcho answers 'S' with an endless byte stream and 'E' with echo.
func sourceOrEcho(c net.Conn) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return
	}
	if b[0] == 'E' {
		_, _ = io.Copy(c, c)
		return
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// clientReadTimeout is konnectivity-client's readTimeoutSeconds: a tunnel
// whose reader leaves a DATA packet undelivered that long is closed, which
// frees whatever its stalled stream held up. A head-of-line test must be
// done before it, or a blocked connection is freed by the client and looks
// unblocked.
const clientReadTimeout = 10 * time.Second

// dialUDSTunnel is dialUDS, also returning the tunnel (Done tells whether
// the client has given it up); the tunnel ends with the test, without
// Close's wait (up to 10s) for a CLOSE_RSP a stalled tunnel cannot deliver.
func dialUDSTunnel(ctx context.Context, t *testing.T, uds, addr string) (net.Conn, konnectivity.Tunnel, error) {
	tunnelCtx, cancel := context.WithCancel(context.Background())
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, tunnelCtx, uds,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", uds)
		}))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	c, err := tunnel.DialContext(ctx, "tcp", addr)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	t.Cleanup(func() { cancel(); _ = c.Close() })
	return c, tunnel, nil
}

// A connection whose reader stopped must not hold up another connection on
// the same agent: with streams-v1 each has its own flow-control window.
// Multiplexed, the other connection's DIAL_RSP queues behind the stalled
// one's data until konnectivity-client's read timeout closes the stalled
// tunnel; so the proof is that the other connection was dialed and moved
// its data while the stalled tunnel was still open, not a throughput
// figure (which a loaded 2-core machine under -race cannot promise).
func TestNoHeadOfLineBlocking(t *testing.T) {
	dest := netproxytest.Listen(t, sourceOrEcho)
	for _, m := range modes {
		if m.serverLegacy || m.agentLegacy {
			continue // upstream's protocol blocks: the point of the others
		}
		t.Run(m.name, func(t *testing.T) { testNoHeadOfLineBlocking(t, startStackFor(t, m, server.Options{}), dest) })
	}
}

func testNoHeadOfLineBlocking(t *testing.T, st *stack, dest string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stalled, stalledTunnel, err := dialUDSTunnel(ctx, t, st.uds, dest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Write([]byte{'S'}); err != nil {
		t.Fatal(err)
	}
	// The client's read timeout starts as soon as the source's first
	// bytes find no reader, about now.
	stalledAt := time.Now()
	// Let the stalled connection fill every buffer on its path.
	time.Sleep(500 * time.Millisecond)
	open := func(what string) {
		t.Helper()
		select {
		case <-stalledTunnel.Done():
			t.Fatalf("the stalled tunnel was closed (konnectivity-client's read timeout, %v after the stall) before %s: nothing proven", time.Since(stalledAt).Round(time.Millisecond), what)
		default:
		}
	}

	// The dial counts: multiplexed, the DIAL_RSP itself is what queues.
	// Unblocked it takes milliseconds; the deadline ends 4s before the
	// client's read timeout could free a blocked stream.
	start := time.Now()
	dialCtx, dialCancel := context.WithDeadline(ctx, stalledAt.Add(clientReadTimeout-4*time.Second))
	defer dialCancel()
	other, err := dialUDS(dialCtx, st.uds, dest)
	if err != nil {
		t.Fatalf("dialing beside a stalled connection: %v", err)
	}
	defer other.Close()
	open("the other connection was dialed")
	if _, err := other.Write([]byte{'E'}); err != nil {
		t.Fatal(err)
	}
	// Eight stream windows: far more than anything the stalled connection
	// holds on the way, so the other connection's credit comes back on its
	// own. It takes well under a second unloaded; the check below fails
	// only if it outlasted the stalled tunnel (about 9s from here).
	const total = 8 * netproxy.StreamWindow
	moved := 0
	for moved < total {
		if err := roundTrip(other, 1<<20); err != nil {
			t.Fatalf("other connection after %d bytes: %v", moved, err)
		}
		moved += 1 << 20
	}
	open(fmt.Sprintf("%d MiB moved on the other connection", total>>20))
	t.Logf("dialed and moved %d MiB on another connection in %s while one reader stalled", total>>20, time.Since(start).Round(time.Millisecond))

	// The stalled connection was held, not dropped: read again, it
	// carries the source on.
	if _, err := io.ReadFull(stalled, make([]byte, 4<<20)); err != nil {
		t.Fatalf("the stalled connection, read again: %v", err)
	}
}

func TestNoAgentAvailable(t *testing.T) {
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	netproxytest.StartServer(t, server.Options{UDSName: uds})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dialUDS(ctx, uds, "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "No agent available") {
		t.Fatalf("dial error %v, want No agent available", err)
	}
}

func TestDestinationUnreachable(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			st := startStackFor(t, m, server.Options{})
			l, _ := net.Listen("tcp", "127.0.0.1:0")
			addr := l.Addr().String()
			l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := dialUDS(ctx, st.uds, addr)
			if err == nil || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("dial error %v, want connection refused", err)
			}
		})
	}
}

// silentAgent connects like an upstream agent and never answers.
func silentAgent(t *testing.T, addr string) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cc.Close() })
	ctx = metadata.AppendToOutgoingContext(ctx, header.AgentID, "silent")
	stream, err := agentpb.NewAgentServiceClient(cc).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
}

func TestBackendDialTimeout(t *testing.T) {
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s := netproxytest.StartServer(t, server.Options{UDSName: uds, BackendDialTimeout: 200 * time.Millisecond})
	silentAgent(t, s.AgentAddr().String())
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := dialUDS(ctx, uds, "10.0.0.1:80")
	if err == nil || !strings.Contains(err.Error(), "dial timeout") {
		t.Fatalf("dial error %v, want dial timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("dial failed after %s, want about 200ms", d)
	}
}

// An agent that dies mid-stream ends the frontend's connection promptly.
func TestAgentKilledMidStream(t *testing.T) {
	dest := netproxytest.Listen(t, sourceOrEcho)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			st := startStackFor(t, m, server.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := dialUDS(ctx, st.uds, dest)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte{'E'}); err != nil {
				t.Fatal(err)
			}
			if err := roundTrip(c, 1024); err != nil {
				t.Fatal(err)
			}
			st.stop()
			done := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, c); done <- err }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("frontend connection still open 5s after the agent died")
			}
		})
	}
}

func TestServerRestartAgentReconnects(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	dir := t.TempDir()
	uds := filepath.Join(dir, "proxy.sock")
	first, stopFirst := startServer(t, server.Options{UDSName: uds, AgentAddress: "127.0.0.1:0", ServerID: "one"})
	addr := first.AgentAddr().String()
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: addr, AgentID: "a"})
	netproxytest.Eventually(t, 5*time.Second, first.Ready, "agent connected")
	stopFirst()
	netproxytest.Eventually(t, 5*time.Second, func() bool { return len(a.ServerIDs()) == 0 }, "agent noticed the server died")
	second := netproxytest.StartServer(t, server.Options{UDSName: uds, AgentAddress: addr, ServerID: "two"})
	netproxytest.Eventually(t, 10*time.Second, second.Ready, "agent reconnected")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialUDS(ctx, uds, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, 1<<20); err != nil {
		t.Fatal(err)
	}
}

func startServer(t *testing.T, o server.Options) (*server.Server, func()) {
	s, err := server.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if !stopped.Swap(true) {
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// Two servers behind a load balancer, --server-count 2: the agent holds
// both; with one gone, traffic still flows through the other.
func TestTwoServersBehindLoadBalancer(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	dir := t.TempDir()
	s1, stop1 := startServer(t, server.Options{UDSName: filepath.Join(dir, "1.sock"), AgentAddress: "127.0.0.1:0", ServerID: "s1", ServerCount: 2, GracefulShutdownTimeout: time.Second})
	s2, _ := startServer(t, server.Options{UDSName: filepath.Join(dir, "2.sock"), AgentAddress: "127.0.0.1:0", ServerID: "s2", ServerCount: 2, GracefulShutdownTimeout: time.Second})
	lb := netproxytest.StartLoadBalancer(t, s1.AgentAddr().String(), s2.AgentAddr().String())
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: lb.Addr, AgentID: "a"})
	netproxytest.Eventually(t, 10*time.Second, func() bool { return len(a.ServerIDs()) == 2 }, "agent holds both servers")
	if !s1.Ready() || !s2.Ready() {
		t.Fatal("a server has no agent")
	}
	stop1()
	netproxytest.Eventually(t, 5*time.Second, func() bool { return len(a.ServerIDs()) == 1 }, "agent dropped the dead server")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialUDS(ctx, filepath.Join(dir, "2.sock"), echo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, 1<<20); err != nil {
		t.Fatal(err)
	}
}

func TestAgentWithoutClientCertificateRejected(t *testing.T) {
	pki := netproxytest.NewPKI(t)
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s := netproxytest.StartServer(t, server.Options{UDSName: uds, AgentTLS: pki.ServerTLS(t)})
	bad, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "nocert", TLS: pki.ClientTLS(t, "")})
	netproxytest.Eventually(t, 5*time.Second, func() bool { return bad.LastError() != nil }, "rejection")
	if err := bad.LastError(); !strings.Contains(err.Error(), "client certificate: none") {
		t.Errorf("rejection error %q does not mention the certificate", err)
	}
	if s.AgentCount() != 0 {
		t.Fatal("agent without a certificate was accepted")
	}
	netproxytest.Eventually(t, 5*time.Second, func() bool {
		mfs, _ := s.Registry().Gather()
		for _, mf := range mfs {
			if mf.GetName() == "konnectivity_network_proxy_server_portside_agent_handshake_failures_total" {
				return mf.GetMetric()[0].GetCounter().GetValue() > 0
			}
		}
		return false
	}, "the server counted the failed handshake")
	good, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "good", TLS: pki.ClientTLS(t, "agent")})
	netproxytest.Eventually(t, 5*time.Second, good.Ready, "agent with a certificate connected")
}

// Token authentication on both links: gRPC (a plaintext agent port, the
// token in metadata) and portside-link/2 (mTLS, the token in the Hello),
// refusals carrying the server's reason either way.
func TestAgentTokenAuthentication(t *testing.T) {
	for _, link := range []bool{false, true} {
		name := "grpc"
		if link {
			name = "portside-link"
		}
		t.Run(name, func(t *testing.T) { testAgentTokenAuthentication(t, link) })
	}
}

func testAgentTokenAuthentication(t *testing.T, link bool) {
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
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	so := server.Options{UDSName: uds, TokenAuth: &server.TokenAuth{
		Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: "system:konnectivity-server", Client: cs}}
	var pki *netproxytest.PKI
	if link {
		pki = netproxytest.NewPKI(t)
		so.AgentTLS = pki.ServerTLS(t)
	}
	s := netproxytest.StartServer(t, so)
	startAgent := func(o agent.Options) *agent.Agent {
		o.ServerAddress = s.AgentAddr().String()
		if link {
			o.TLS = pki.ClientTLS(t, o.AgentID)
		}
		a, _ := netproxytest.StartAgent(t, o)
		return a
	}
	dir := t.TempDir()
	write := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := startAgent(agent.Options{AgentID: "bad", ServiceAccountTokenPath: write("bad", "wrong-token")})
	none := startAgent(agent.Options{AgentID: "none"})
	netproxytest.Eventually(t, 5*time.Second, func() bool { return bad.LastError() != nil && none.LastError() != nil }, "rejections")
	for _, a := range []*agent.Agent{bad, none} {
		if err := a.LastError(); !strings.Contains(err.Error(), "Unauthenticated") || !strings.Contains(err.Error(), "agent authentication failed") {
			t.Errorf("agent %s: rejection error %q is not clear", a.ID(), err)
		}
	}
	if s.AgentCount() != 0 {
		t.Fatal("unauthenticated agent accepted")
	}
	good := startAgent(agent.Options{AgentID: "good", ServiceAccountTokenPath: write("good", "good-token")})
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "authenticated agent connected")
	if link {
		assertLink(t, s, good)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialUDS(ctx, uds, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// On shutdown the server refuses new dials, lets open tunnels carry on up
// to the graceful timeout, then closes them.
func TestGracefulShutdown(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s, stop := startServer(t, server.Options{UDSName: uds, AgentAddress: "127.0.0.1:0", GracefulShutdownTimeout: 2 * time.Second})
	netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "a"})
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialUDS(ctx, uds, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stopped := make(chan time.Time)
	start := time.Now()
	go func() { stop(); stopped <- time.Now() }()
	netproxytest.Eventually(t, 2*time.Second, func() bool { return !s.Ready() }, "not ready while draining")
	if err := roundTrip(c, 64<<10); err != nil {
		t.Fatalf("open tunnel broke during the drain: %v", err)
	}
	if _, err := dialUDS(ctx, uds, echo); err == nil {
		t.Fatal("new dial accepted during the drain")
	}
	select {
	case at := <-stopped:
		if d := at.Sub(start); d < 1500*time.Millisecond || d > 5*time.Second {
			t.Fatalf("shutdown took %s, want about the 2s graceful timeout", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not finish")
	}
	if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Logf("tunnel ended with %v", err)
	}
}

func gauge(t *testing.T, a *agent.Agent, name string) float64 {
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// A stopping agent sends DRAIN: its open connections continue, and new
// dials go to other agents.
func TestAgentDrain(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	s := netproxytest.StartServer(t, server.Options{UDSName: uds})
	a, stopA := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "a", DrainTimeout: 3 * time.Second})
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent a connected")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := dialUDS(ctx, uds, echo)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "b"})
	netproxytest.Eventually(t, 5*time.Second, func() bool { return s.AgentCount() == 2 }, "agent b connected")

	stopped := make(chan struct{})
	go func() { stopA(); close(stopped) }()
	netproxytest.Eventually(t, 5*time.Second, func() bool { return !a.Ready() }, "agent a draining")
	time.Sleep(100 * time.Millisecond) // the DRAIN packet reaches the server
	var conns []net.Conn
	for i := 0; i < 10; i++ {
		c, err := dialUDS(ctx, uds, echo)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if got := gauge(t, b, "konnectivity_network_proxy_agent_open_endpoint_connections"); got != 10 {
		t.Errorf("agent b serves %v new connections, want all 10", got)
	}
	if err := roundTrip(old, 64<<10); err != nil {
		t.Fatalf("connection on the draining agent broke: %v", err)
	}
	old.Close()
	for _, c := range conns {
		c.Close()
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("draining agent did not stop")
	}
}

// Malformed or out-of-order frontend packets get clear answers.
func TestBadFrontendInput(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	st := startStack(t, false, false, server.Options{})
	recvType := func(stream client.ProxyService_ProxyClient, want client.PacketType) *client.Packet {
		t.Helper()
		p, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if p.Type != want {
			t.Fatalf("got %v, want %v", p, want)
		}
		return p
	}

	// DATA before any dial.
	stream, done := rawFrontend(t, st.uds)
	_ = stream.Send(netproxy.Data(5, []byte("early")))
	if p := recvType(stream, client.PacketType_CLOSE_RSP); !strings.Contains(p.GetCloseResponse().Error, "not established") {
		t.Errorf("DATA before dial answered %q", p.GetCloseResponse().Error)
	}
	done()

	// A packet without payload, an unknown type, CLOSE_REQ for an unknown
	// connection, then a bad protocol.
	stream, done = rawFrontend(t, st.uds)
	_ = stream.Send(&client.Packet{Type: client.PacketType_DIAL_REQ})
	_ = stream.Send(&client.Packet{Type: client.PacketType(42)})
	_ = stream.Send(netproxy.CloseReq(99))
	if p := recvType(stream, client.PacketType_CLOSE_RSP); p.GetCloseResponse().Error != "unknown connection" {
		t.Errorf("CLOSE_REQ for unknown connection answered %q", p.GetCloseResponse().Error)
	}
	// The protocol goes to the agent as sent (upstream's server forwards
	// it too): the refusal is the agent's dial error.
	_ = stream.Send(netproxy.DialReq(1, "bogus", echo))
	if p := recvType(stream, client.PacketType_DIAL_RSP); !strings.Contains(p.GetDialResponse().Error, "unknown network bogus") {
		t.Errorf("dial with protocol bogus answered %q", p.GetDialResponse().Error)
	}
	done()

	// DATA with the wrong connect ID after a successful dial.
	stream, done = rawFrontend(t, st.uds)
	defer done()
	_ = stream.Send(netproxy.DialReq(2, "tcp", echo))
	id := recvType(stream, client.PacketType_DIAL_RSP).GetDialResponse().ConnectID
	_ = stream.Send(netproxy.Data(id+1000, []byte("x")))
	recvType(stream, client.PacketType_CLOSE_RSP)
	netproxytest.Eventually(t, 5*time.Second, func() bool {
		return gauge(t, st.agent, "konnectivity_network_proxy_agent_open_endpoint_connections") == 0
	}, "the agent closed the connection")
}
