package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/link"
)

// linkRetry is how long an agent whose server did not choose
// portside-link/2 (an upstream server, or --portside-link=false) connects
// with gRPC before offering the link again, so an upgraded server is
// noticed without a handshake wasted at every connect.
const linkRetry = 5 * time.Minute

// errNotLink: the server did not choose the link; connect with gRPC.
var errNotLink = errors.New("server did not choose " + link.ALPN)

// offerLink says whether this connect offers portside-link/2.
func (a *Agent) offerLink() bool {
	if a.opts.TLS == nil || a.opts.DisableLink {
		return false // ALPN needs TLS
	}
	if viaProxy(a.opts.ServerAddress) {
		// gRPC reaches the server through HTTPS_PROXY; the link dials
		// directly, which such a network may not allow.
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Now().After(a.noLinkUntil)
}

// Links is how many of the servers held are on portside-link/2 (the
// others on gRPC): a test of one protocol cannot tell from the bytes.
func (a *Agent) Links() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.sessions {
		if s.ln != nil {
			n++
		}
	}
	return n
}

// connectLink connects to a server offering portside-link/2 first: one
// TLS handshake whose ALPN says which protocol follows. errNotLink when
// the server chose gRPC; the caller then connects with gRPC.
func (a *Agent) connectLink(ctx context.Context) error {
	var cert certRecord
	cfg := cert.wrap(a.opts.TLS)
	cfg.NextProtos = linkOffer(a.opts.TLS.NextProtos)
	if cfg.ServerName == "" {
		// As gRPC's TLS credentials: the server name is the address's host.
		host, _, err := net.SplitHostPort(a.opts.ServerAddress)
		if err != nil {
			host = a.opts.ServerAddress
		}
		cfg.ServerName = host
	}
	hctx, cancel := context.WithTimeout(ctx, headerTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(hctx, "tcp", a.opts.ServerAddress)
	if err != nil {
		return err
	}
	conn, state, err := netproxy.HandshakeTLS(hctx, raw, cfg, true)
	if err != nil {
		_ = raw.Close()
		return a.explainLink(err, &cert)
	}
	if state.NegotiatedProtocol != link.ALPN {
		_ = conn.Close()
		a.mu.Lock()
		a.noLinkUntil = time.Now().Add(linkRetry)
		first := !a.linkRefusedLogged
		a.linkRefusedLogged = true
		a.mu.Unlock()
		if first {
			a.logger.Info("Server does not offer "+link.ALPN+"; connecting with gRPC", "server", a.opts.ServerAddress, "retryIn", linkRetry)
		}
		return errNotLink
	}
	hello := link.Hello{AgentID: a.opts.AgentID, AgentIdentifiers: a.opts.AgentIdentifiers}
	if p := a.opts.ServiceAccountTokenPath; p != "" {
		// Read at every connect: the kubelet rotates projected tokens.
		tok, err := os.ReadFile(p)
		if err != nil {
			_ = conn.Close()
			return fmt.Errorf("reading service account token: %w", err)
		}
		hello.Token = strings.TrimSpace(string(tok))
	}
	_ = conn.SetDeadline(time.Now().Add(headerTimeout))
	var welcome link.Welcome
	err = link.WriteMessage(conn, hello)
	if err == nil {
		err = link.ReadMessage(conn, &welcome)
	}
	if err != nil {
		_ = conn.Close()
		return a.explainLink(err, &cert)
	}
	if welcome.Refused != "" || welcome.ServerID == "" {
		_ = conn.Close()
		return fmt.Errorf("server refused the agent: %s: %s", welcome.Code, welcome.Refused)
	}
	_ = conn.SetDeadline(time.Time{})
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{a: a, ctx: sctx, cancel: scancel, serverID: welcome.ServerID, ln: link.Server(conn, link.Config{}),
		dials: map[int64]context.CancelFunc{}, conns: map[int64]*muxConn{}, done: make(chan struct{})}
	s.logger = a.logger.WithValues("serverID", welcome.ServerID)
	if err := a.addSession(s, welcome.ServerCount); err != nil {
		scancel()
		_ = s.ln.Close()
		return err
	}
	s.logger.Info("Connected to proxy server", "serverCount", welcome.ServerCount, "link", link.ALPN)
	go s.serveLink()
	go s.probe()
	return nil
}

// explainLink adds to a failure during or right after the handshake what
// the agent sent, as explain does for gRPC: with TLS 1.3 a server
// rejecting the client certificate surfaces only as a broken connection
// once the agent reads.
func (a *Agent) explainLink(err error, cert *certRecord) error {
	return fmt.Errorf("TLS connection to %s failed (client certificate: %s; a server requiring mTLS rejects agents without a valid one): %w",
		a.opts.ServerAddress, cert, err)
}

// serveLink takes the server's dials until the session ends.
func (s *session) serveLink() {
	stop := context.AfterFunc(s.ctx, func() { _ = s.ln.Close() })
	defer func() {
		stop()
		s.cancel()
		_ = s.ln.Close()
		s.a.removeSession(s)
		close(s.done)
	}()
	for {
		r, err := s.ln.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				// Not closed here: the server went away (or broke the
				// link), counted as upstream's agent counts a server
				// stream that fails (Unavailable, from_server).
				s.a.m.recvFailed(status.Errorf(codes.Unavailable, "server link ended: %v", err))
				s.logger.Info("Server link ended", "err", err)
			}
			return
		}
		s.a.m.packet(client.PacketType_DIAL_REQ)
		go s.linkDial(r)
	}
}

// linkDial dials a destination for the server and, once connected,
// copies both ways until either end closes; the link's flow control per
// connection means a destination that stops reading stalls only itself.
func (s *session) linkDial(r *link.Request) {
	logger := s.logger.WithValues("address", r.Address)
	s.a.liveConns.Add(1)
	defer s.a.liveConns.Add(-1)
	ctx, cancel := context.WithTimeout(s.ctx, s.a.opts.DialTimeout)
	start := time.Now()
	var d net.Dialer
	nc, err := d.DialContext(ctx, r.Network, r.Address)
	cancel()
	if err == nil && r.Canceled() {
		_ = nc.Close()
		err = errors.New("dial abandoned by the server")
	}
	s.a.m.sent(client.PacketType_DIAL_RSP)
	if err != nil {
		s.a.m.dialFailed(err)
		logger.V(2).Info("Dial failed", "err", err)
		r.Reject(err)
		return
	}
	st, err := r.Accept()
	if err != nil {
		_ = nc.Close()
		return
	}
	s.a.m.dialDuration.Observe(time.Since(start).Seconds())
	s.a.m.openEndpointConns.Inc()
	defer s.a.m.openEndpointConns.Dec()
	toDest := make(chan struct{})
	cc := countedConn{Conn: nc, m: s.a.m}
	if sc, ok := nc.(syscall.Conn); ok {
		cc.rc, _ = sc.SyscallConn()
	}
	go func() {
		defer close(toDest)
		_, _ = st.WriteTo(cc)
		_ = nc.Close() // the server closed, or the destination broke
	}()
	_, _ = st.ReadFrom(cc)
	_ = st.Close()
	_ = nc.Close()
	<-toDest
	s.a.m.sent(client.PacketType_CLOSE_RSP)
}

// pingLink is the link's probe: the server answers pings. Generous: the
// pong queues behind the data already written, a few MiB on a slow path.
func (s *session) pingLink() error {
	ctx, cancel := context.WithTimeout(s.ctx, max(s.a.opts.ProbeInterval, time.Minute))
	defer cancel()
	return s.ln.Ping(ctx)
}

// countedConn counts the link's data as upstream's agent counts DATA
// packets (stream_packets_total, to_agent and from_agent), a write to the
// destination or a read from it standing for one packet: the link has no
// packets, and without this a connection reused for many requests (as
// kube-apiserver reuses its connections to a kubelet) would look idle.
type countedConn struct {
	net.Conn
	m *metrics
	// rc writes without waiting (TryWrite): the link's reader writes a
	// payload to the destination itself when nothing is queued before it
	// and the socket takes it (link.TryWriter).
	rc syscall.RawConn
}

// TryWrite is one write(2) on the non-blocking socket, however much it
// takes, 0 when it takes nothing or fails (WriteTo's Write then waits or
// meets the failure).
func (c countedConn) TryWrite(p []byte) int {
	if c.rc == nil {
		return 0
	}
	n := 0
	_ = c.rc.Write(func(fd uintptr) bool {
		if w, err := syscall.Write(int(fd), p); err == nil {
			n = w
		}
		return true // never wait for the socket to be writable
	})
	if n == len(p) {
		// A payload only partly taken is counted by the Write of the
		// rest: one packet either way.
		c.m.packet(client.PacketType_DATA)
	}
	return n
}

func (c countedConn) Write(p []byte) (int, error) {
	c.m.packet(client.PacketType_DATA)
	return c.Conn.Write(p)
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.m.sent(client.PacketType_DATA)
	}
	return n, err
}

// viaProxy says whether the environment's proxy settings (HTTPS_PROXY,
// NO_PROXY) send a connection to addr through a proxy, as grpc-go's
// default dialer does for the gRPC link.
func viaProxy(addr string) bool {
	u, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: addr}})
	return err == nil && u != nil
}

// linkOffer is the agent's ALPN offer with the link: the link first, then
// what gRPC would offer, --alpn-proto's protocols (a front end may route
// by them) and h2.
func linkOffer(alpn []string) []string {
	offer := append([]string{link.ALPN}, alpn...)
	if !slices.Contains(offer, "h2") {
		offer = append(offer, "h2")
	}
	return offer
}
