package server_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
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

// A DIAL_REQ's protocol goes to the agent as the frontend sent it, as
// upstream's server does: the agent dials it (udp here) or answers the
// error, and the server adds no rule of its own. konnectivity-client only
// dials tcp, so the frontend here speaks the ProxyService protocol itself.

// udpEcho answers each datagram with itself.
func udpEcho(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	return pc.LocalAddr().String()
}

// rawDial opens a ProxyService stream on uds and sends one DIAL_REQ; it
// returns the stream and the DIAL_RSP.
func rawDial(ctx context.Context, t *testing.T, uds, protocol, address string) (client.ProxyService_ProxyClient, *client.DialResponse) {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+uds, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	stream, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&client.Packet{Type: client.PacketType_DIAL_REQ, Payload: &client.Packet_DialRequest{
		DialRequest: &client.DialRequest{Protocol: protocol, Address: address, Random: 42}}}); err != nil {
		t.Fatal(err)
	}
	for {
		pkt, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for the DIAL_RSP: %v", err)
		}
		if r := pkt.GetDialResponse(); pkt.Type == client.PacketType_DIAL_RSP && r != nil {
			return stream, r
		}
	}
}

// udpRoundTrip sends one datagram through an established connection and
// waits for its echo.
func udpRoundTrip(t *testing.T, stream client.ProxyService_ProxyClient, connectID int64, msg string) {
	t.Helper()
	if err := stream.Send(&client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{
		Data: &client.Data{ConnectID: connectID, Data: []byte(msg)}}}); err != nil {
		t.Fatal(err)
	}
	for {
		pkt, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for the echo of %q: %v", msg, err)
		}
		if d := pkt.GetData(); pkt.Type == client.PacketType_DATA && d != nil {
			if string(d.Data) != msg {
				t.Fatalf("echo %q; want %q", d.Data, msg)
			}
			return
		}
	}
}

// upstreamServer runs upstream's v0.34.0 server in process: its agent
// port and its frontend socket.
func upstreamServer(t *testing.T) (agentAddr, uds string) {
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
	agentSrv, feSrv := grpc.NewServer(), grpc.NewServer()
	agentpb.RegisterAgentServiceServer(agentSrv, ps)
	client.RegisterProxyServiceServer(feSrv, ps)
	go func() { _ = agentSrv.Serve(agentLn) }()
	go func() { _ = feSrv.Serve(feLn) }()
	t.Cleanup(func() { feSrv.Stop(); agentSrv.Stop() })
	return agentLn.Addr().String(), uds
}

// upstreamAgent runs upstream's v0.34.0 agent in process.
func upstreamAgent(t *testing.T, serverAddr string) {
	stop := make(chan struct{})
	cfg := &anpagent.ClientSetConfig{Address: serverAddr, AgentID: "upstream-agent",
		SyncInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond, SyncIntervalCap: time.Second,
		DialOptions:    []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		XfrChannelSize: 150, ServerCountSource: "default"}
	cs := cfg.NewAgentClientSet(make(chan struct{}), stop)
	cs.SetServerCounter(anpagent.NewAggregateServerCounter(nil, anpagent.NewResponseBasedCounter(cs), "default"))
	cs.Serve()
	t.Cleanup(func() { close(stop) })
}

func TestDialProtocolPassedToAgent(t *testing.T) {
	echo := udpEcho(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (uds string, ready func() bool)
	}{
		{"portside server, portside agent", func(t *testing.T) (string, func() bool) {
			uds := filepath.Join(t.TempDir(), "proxy.sock")
			s := netproxytest.StartServer(t, server.Options{UDSName: uds})
			netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "portside-agent"})
			return uds, s.Ready
		}},
		{"portside server, upstream agent", func(t *testing.T) (string, func() bool) {
			uds := filepath.Join(t.TempDir(), "proxy.sock")
			s := netproxytest.StartServer(t, server.Options{UDSName: uds})
			upstreamAgent(t, s.AgentAddr().String())
			return uds, s.Ready
		}},
		// The reference: upstream's own server, with Portside's agent.
		{"upstream server, portside agent", func(t *testing.T) (string, func() bool) {
			agentAddr, uds := upstreamServer(t)
			a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: agentAddr, AgentID: "portside-agent"})
			return uds, func() bool { return len(a.ServerIDs()) == 1 }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uds, ready := tc.setup(t)
			netproxytest.Eventually(t, 10*time.Second, ready, "the agent connected")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			stream, rsp := rawDial(ctx, t, uds, "udp", echo)
			if rsp.Error != "" {
				t.Fatalf("udp dial to %s refused: %s", echo, rsp.Error)
			}
			udpRoundTrip(t, stream, rsp.ConnectID, "one datagram")
			udpRoundTrip(t, stream, rsp.ConnectID, "and another")
			_ = stream.Send(&client.Packet{Type: client.PacketType_CLOSE_REQ, Payload: &client.Packet_CloseRequest{
				CloseRequest: &client.CloseRequest{ConnectID: rsp.ConnectID}}})

			// A protocol no agent can dial: the agent's error, not the
			// server's.
			_, rsp = rawDial(ctx, t, uds, "bogus", echo)
			if !strings.Contains(rsp.Error, "unknown network bogus") {
				t.Fatalf("dial with protocol bogus: error %q; want the agent's dial error (unknown network bogus)", rsp.Error)
			}
		})
	}
}
