package agent_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// TestStreamsBehindL7Proxy: an agent reaches two servers through a real
// L7 gRPC proxy (an HTTP/2 reverse proxy routing each stream on its own)
// that sends control streams round-robin and every per-connection stream
// to the other server than the one holding its session. A dial whose
// connection stream lands on a server that does not know the session
// fails at once with the agent's error, not after the frontend's timeout;
// the agent then falls back to upstream's protocol for that server (the
// other keeps streams-v1 until its own first dial), and the next dials
// through both work.
func TestStreamsBehindL7Proxy(t *testing.T) {
	echo := netproxytest.Listen(t, netproxytest.Echo)
	dir := t.TempDir()
	uds1, uds2 := filepath.Join(dir, "1.sock"), filepath.Join(dir, "2.sock")
	s1 := netproxytest.StartServer(t, server.Options{UDSName: uds1, ServerID: "s1", ServerCount: 2})
	s2 := netproxytest.StartServer(t, server.Options{UDSName: uds2, ServerID: "s2", ServerCount: 2})
	proxy := startL7Proxy(t, s1.AgentAddr().String(), s2.AgentAddr().String())
	a, _ := netproxytest.StartAgent(t, agent.Options{ServerAddress: proxy, AgentID: "a", DialTimeout: 3 * time.Second})
	netproxytest.Eventually(t, 10*time.Second, func() bool { return len(a.ServerIDs()) == 2 }, "agent holds both servers")
	if v1, held := a.StreamsV1(); v1 != 2 {
		t.Fatalf("streams-v1 on %d of %d servers before any dial, want 2", v1, held)
	}

	began := time.Now()
	_, err := dialThrough(t, uds1, echo)
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "did not reach this server") {
		t.Fatalf("dial through s1 (its stream sent to s2) = %v after %v, want the agent's error", err, took)
	}
	if took > 2*time.Second {
		t.Errorf("the failed dial took %v, want it at once", took)
	}
	t.Logf("dial through s1 failed after %v: %v", took.Round(time.Millisecond), err)
	if v1, _ := a.StreamsV1(); v1 != 1 {
		t.Errorf("streams-v1 on %d servers after s1's fallback, want 1 (s2's)", v1)
	}
	if _, err := dialThrough(t, uds2, echo); err == nil {
		t.Fatal("dial through s2 (its stream sent to s1) succeeded")
	}
	if v1, _ := a.StreamsV1(); v1 != 0 {
		t.Errorf("streams-v1 on %d servers after both fell back, want 0", v1)
	}
	for i := range 3 {
		for _, uds := range []string{uds1, uds2} {
			c, err := dialThrough(t, uds, echo)
			if err != nil {
				t.Fatalf("dial %d through %s after the fallback: %v", i, filepath.Base(uds), err)
			}
			line := fmt.Sprintf("hello %d via %s\n", i, filepath.Base(uds))
			if _, err := io.WriteString(c, line); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, len(line))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != line {
				t.Fatalf("echo via %s = %q %v", filepath.Base(uds), buf, err)
			}
			_ = c.Close()
		}
	}
}

// dialThrough dials addr through the server's unix socket, as
// kube-apiserver does, with its own 10 s budget.
func dialThrough(t *testing.T, uds, addr string) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tctx, tcancel := context.WithCancel(context.Background())
	tun, err := client.CreateSingleUseGrpcTunnelWithContext(ctx, tctx, "unix://"+uds, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tcancel()
		return nil, err
	}
	c, err := tun.DialContext(ctx, "tcp", addr)
	if err != nil {
		tcancel()
		return nil, err
	}
	t.Cleanup(func() { tcancel(); _ = c.Close() })
	return c, nil
}

// startL7Proxy is an h2c gRPC reverse proxy for two backends: control
// streams go to them in turn; a per-connection stream (it carries the dial
// header) goes to the backend that did not hand out its session token (as
// seen in the control streams' response headers).
func startL7Proxy(t *testing.T, backends ...string) string {
	t.Helper()
	var next atomic.Int64
	var sessions sync.Map // token → backend
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			to := backends[int(next.Add(1)-1)%len(backends)]
			if r.In.Header.Get(netproxy.HeaderDial) != "" {
				owner, _ := sessions.Load(r.In.Header.Get(netproxy.HeaderSession))
				to = backends[0]
				if owner == backends[0] {
					to = backends[1]
				}
			}
			r.Out.URL.Scheme, r.Out.URL.Host = "http", to
		},
		ModifyResponse: func(resp *http.Response) error {
			if tok := resp.Header.Get(netproxy.HeaderSession); tok != "" && resp.Request.Header.Get(netproxy.HeaderDial) == "" {
				sessions.Store(tok, resp.Request.URL.Host)
			}
			return nil
		},
		Transport: &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}},
		FlushInterval: -1,
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: rp, Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	return l.Addr().String()
}
