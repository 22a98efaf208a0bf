package netproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// dialUDS dials addr through the proxy's unix socket exactly as
// kube-apiserver does: a single-use gRPC tunnel per connection.
func dialUDS(ctx context.Context, uds, addr string) (net.Conn, error) {
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnel(ctx, uds,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", uds)
		}))
	if err != nil {
		return nil, err
	}
	return tunnel.DialContext(ctx, "tcp", addr)
}

// dialConnect dials addr with HTTP CONNECT over TLS.
func dialConnect(proxy string, cfg *tls.Config, addr string) (net.Conn, error) {
	c, err := tls.Dial("tcp", proxy, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		return nil, fmt.Errorf("CONNECT: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return &bufConn{Conn: c, r: br}, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// roundTrip writes n random bytes and checks they come back.
func roundTrip(c net.Conn, n int) error {
	want := make([]byte, n)
	_, _ = rand.Read(want)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(want); errc <- err }()
	got := make([]byte, n)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("data corrupted")
	}
	return nil
}

type stack struct {
	srv   *server.Server
	uds   string
	agent *agent.Agent
	stop  func()
}

// modes are the protocol combinations: Portside on both sides negotiates
// streams-v1 on a plaintext agent port and portside-link/2 on a TLS one;
// either side refusing falls back to upstream's protocol.
type mode struct {
	name                      string
	serverLegacy, agentLegacy bool
	link                      bool // mTLS agent port, where ALPN chooses portside-link/2
}

var modes = []mode{
	{name: "streams-v1"},
	{name: "upstream-agent-protocol", agentLegacy: true},
	{name: "upstream-server-protocol", serverLegacy: true},
	{name: "portside-link", link: true},
}

func startStack(t *testing.T, serverLegacy, agentLegacy bool, so server.Options) *stack {
	t.Helper()
	return startStackFor(t, mode{serverLegacy: serverLegacy, agentLegacy: agentLegacy}, so)
}

func startStackFor(t *testing.T, m mode, so server.Options, agentOpts ...func(*agent.Options)) *stack {
	t.Helper()
	if so.UDSName == "" && so.Mode != server.ModeHTTPConnect {
		so.UDSName = filepath.Join(t.TempDir(), "proxy.sock")
	}
	so.DisableStreams = m.serverLegacy
	ao := agent.Options{AgentID: "agent-1", DisableStreams: m.agentLegacy}
	for _, set := range agentOpts {
		set(&ao)
	}
	if m.link {
		pki := netproxytest.NewPKI(t)
		so.AgentTLS = pki.ServerTLS(t)
		ao.TLS = pki.ClientTLS(t, "agent-1")
	}
	s := netproxytest.StartServer(t, so)
	ao.ServerAddress = s.AgentAddr().String()
	a, stop := netproxytest.StartAgent(t, ao)
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")
	if m.link {
		assertLink(t, s, a)
	} else {
		assertProtocol(t, s, a, !m.serverLegacy && !m.agentLegacy)
	}
	return &stack{srv: s, uds: so.UDSName, agent: a, stop: stop}
}

// assertLink fails unless the agent's one session is on portside-link/2
// at both ends (the bytes alone would not tell a fallback to gRPC).
func assertLink(t testing.TB, s *server.Server, a *agent.Agent) {
	t.Helper()
	netproxytest.Eventually(t, 5*time.Second, func() bool { return len(a.ServerIDs()) == 1 }, "agent session")
	if n := a.Links(); n != 1 {
		t.Fatalf("agent: %d of 1 sessions on portside-link/2", n)
	}
	if n := s.LinkAgents(); n != 1 || s.AgentCount() != 1 {
		t.Fatalf("server: %d of %d agents on portside-link/2, want 1 of 1", n, s.AgentCount())
	}
}

// assertProtocol fails unless the agent's one control stream negotiated
// the protocol the mode is named after, on both ends: either protocol
// carries bytes correctly, so without this a streams-v1 case that fell
// back to upstream's protocol would pass unnoticed.
func assertProtocol(t testing.TB, s *server.Server, a *agent.Agent, wantV1 bool) {
	t.Helper()
	want := 0
	if wantV1 {
		want = 1
	}
	// The agent records its session once it has read the server's
	// headers, a moment after the server counts the agent.
	netproxytest.Eventually(t, 5*time.Second, func() bool { _, held := a.StreamsV1(); return held == 1 }, "agent session")
	if v1, _ := a.StreamsV1(); v1 != want {
		t.Fatalf("agent: %d of 1 control stream negotiated streams-v1, want %d", v1, want)
	}
	if got := s.StreamsV1Agents(); got != want || s.AgentCount() != 1 {
		t.Fatalf("server: %d of %d agents negotiated streams-v1, want %d of 1", got, s.AgentCount(), want)
	}
}

func TestGRPCFrontendEcho(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			st := startStackFor(t, m, server.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := dialUDS(ctx, st.uds, echo)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			if err := roundTrip(c, 4<<20); err != nil {
				t.Fatal(err)
			}
			// konnectivity-client v0.36 closes the tunnel when CLOSE_RSP
			// arrives; if that wins the race with Close's own wait, Close
			// reports "tunnel closed" although the close completed.
			if err := c.Close(); err != nil && !strings.Contains(err.Error(), "tunnel closed") {
				t.Fatalf("close: %v", err)
			}

			// Many concurrent connections.
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for i := 0; i < 64; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := dialUDS(ctx, st.uds, echo)
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					if err := roundTrip(c, 64<<10); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestHTTPConnectTLS(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	pki := netproxytest.NewPKI(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			st := startStackFor(t, m, server.Options{Mode: server.ModeHTTPConnect,
				FrontendTLS: pki.ServerTLS(t)})
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := 0; i < 32; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := dialConnect(st.srv.FrontendAddr().String(), pki.ClientTLS(t, "kube-apiserver"), echo)
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					if err := roundTrip(c, 256<<10); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// A client without a certificate is refused by mTLS.
			if _, err := dialConnect(st.srv.FrontendAddr().String(), pki.ClientTLS(t, ""), echo); err == nil {
				t.Error("CONNECT without a client certificate succeeded")
			}
		})
	}
}

func TestHTTPConnectUDS(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	uds := filepath.Join(t.TempDir(), "connect.sock")
	startStack(t, false, false, server.Options{Mode: server.ModeHTTPConnect, UDSName: uds})
	c, err := net.Dial("unix", uds)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 200 Connection Established\r\n" {
		t.Fatalf("status line %q, %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(&bufConn{Conn: c, r: br}, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// The gRPC frontend over TCP with mTLS, as kube-apiserver's egress
// selector "grpc" transport with TLS.
func TestGRPCFrontendTLS(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	pki := netproxytest.NewPKI(t)
	s := netproxytest.StartServer(t, server.Options{FrontendTLS: pki.ServerTLS(t)})
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "a"})
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")
	assertProtocol(t, s, a, true)
	dial := func(cfg *tls.Config) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		//lint:ignore SA1019 kube-apiserver dials its egress proxy with WithBlock
		block := grpc.WithBlock()
		tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, context.Background(), s.FrontendAddr().String(),
			grpc.WithTransportCredentials(credentials.NewTLS(cfg)), block)
		if err != nil {
			return nil, err
		}
		return tunnel.DialContext(ctx, "tcp", echo)
	}
	c, err := dial(pki.ClientTLS(t, "kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(pki.ClientTLS(t, "")); err == nil {
		t.Fatal("frontend without a client certificate was served")
	}
}
