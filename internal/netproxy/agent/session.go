package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/link"
)

// headerTimeout bounds the wait for a server's response headers, which
// carry its ID; a server that accepts TCP but never answers must not hang
// the sync loop.
const headerTimeout = 30 * time.Second

// session is one control stream to one server.
type session struct {
	a        *Agent
	logger   logr.Logger
	cc       *grpc.ClientConn
	ln       *link.Session // portside-link/2 instead of cc and stream
	client   agentpb.AgentServiceClient
	stream   agentpb.AgentService_ConnectClient
	ctx      context.Context
	cancel   context.CancelFunc
	serverID string
	// v1: connections get streams of their own (streams-v1); cleared when
	// one reaches a server without the session (fallback).
	v1    atomic.Bool
	ack   bool   // the server acknowledges per-connection streams (FeatureStreamsAck)
	token string // streams-v1 session token

	sendMu    sync.Mutex
	drainOnce sync.Once
	nextID    atomic.Int64

	mu    sync.Mutex
	dials map[int64]context.CancelFunc
	conns map[int64]*muxConn // multiplexed (upstream server) connections
	done  chan struct{}
}

// connectOnce opens one control stream and keeps it if it reaches a
// server not yet held.
func (a *Agent) connectOnce(ctx context.Context) error {
	if a.offerLink() {
		if err := a.connectLink(ctx); !errors.Is(err, errNotLink) {
			return err
		}
	}
	creds := insecure.NewCredentials()
	var cert certRecord
	if a.opts.TLS != nil {
		creds = netproxy.BatchTLS(credentials.NewTLS(cert.wrap(a.opts.TLS)))
	}
	dopts := append(netproxy.DialOptions(a.opts.KeepaliveTime), grpc.WithTransportCredentials(creds))
	cc, err := grpc.NewClient("passthrough:///"+a.opts.ServerAddress, dopts...)
	if err != nil {
		return err
	}
	md := metadata.Pairs(header.AgentID, a.opts.AgentID, header.AgentIdentifiers, a.opts.AgentIdentifiers)
	if !a.opts.DisableStreams {
		md.Append(netproxy.HeaderFeatures, netproxy.FeatureStreamsV1)
	}
	if p := a.opts.ServiceAccountTokenPath; p != "" {
		// Read at every connect: the kubelet rotates projected tokens.
		tok, err := os.ReadFile(p)
		if err != nil {
			_ = cc.Close()
			return fmt.Errorf("reading service account token: %w", err)
		}
		md.Append(header.AuthenticationTokenContextKey, header.AuthenticationTokenContextSchemePrefix+strings.TrimSpace(string(tok)))
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	fail := func(err error) error {
		cancel()
		_ = cc.Close()
		return err
	}
	ac := agentpb.NewAgentServiceClient(cc)
	stream, err := ac.Connect(metadata.NewOutgoingContext(sctx, md))
	if err != nil {
		return fail(a.explain(err, &cert))
	}
	timer := time.AfterFunc(headerTimeout, cancel)
	hdr, err := stream.Header()
	timer.Stop()
	if err != nil {
		return fail(a.explain(err, &cert))
	}
	serverID := first(hdr.Get(header.ServerID))
	if serverID == "" {
		// No headers: the server refused the stream; its status says why.
		_, rerr := stream.Recv()
		if st, ok := status.FromError(rerr); ok && rerr != nil {
			return fail(fmt.Errorf("server refused the agent: %s: %s", st.Code(), st.Message()))
		}
		return fail(fmt.Errorf("server sent no %s header: %v", header.ServerID, rerr))
	}
	count, err := strconv.Atoi(first(hdr.Get(header.ServerCount)))
	if err != nil {
		return fail(fmt.Errorf("bad %s header: %v", header.ServerCount, err))
	}
	s := &session{a: a, cc: cc, client: ac, stream: stream, ctx: sctx, cancel: cancel, serverID: serverID,
		dials: map[int64]context.CancelFunc{}, conns: map[int64]*muxConn{}, done: make(chan struct{})}
	if !a.opts.DisableStreams && contains(hdr.Get(netproxy.HeaderFeatures), netproxy.FeatureStreamsV1) {
		s.token = first(hdr.Get(netproxy.HeaderSession))
		s.v1.Store(s.token != "")
		s.ack = contains(hdr.Get(netproxy.HeaderFeatures), netproxy.FeatureStreamsAck)
	}
	s.logger = a.logger.WithValues("serverID", serverID)
	if err := a.addSession(s, count); err != nil {
		return fail(err)
	}
	s.logger.Info("Connected to proxy server", "serverCount", count, "streamsV1", s.v1.Load())
	go s.serve()
	go s.probe()
	return nil
}

// certRecord records, through GetClientCertificate, whether the server
// asked for a client certificate and whether one was sent.
type certRecord struct{ state atomic.Int32 } // 0 not asked, 1 sent, 2 asked, none sent

func (r *certRecord) wrap(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	get, certs := cfg.GetClientCertificate, cfg.Certificates
	cfg.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		var c *tls.Certificate
		if get != nil {
			var err error
			if c, err = get(cri); err != nil {
				return nil, err
			}
		} else {
			// crypto/tls's own choice: the first certificate the server
			// accepts, else the first one.
			for i := range certs {
				if cri.SupportsCertificate(&certs[i]) == nil {
					c = &certs[i]
					break
				}
			}
			if c == nil && len(certs) > 0 {
				c = &certs[0]
			}
		}
		if c == nil {
			c = &tls.Certificate{}
		}
		if len(c.Certificate) > 0 {
			r.state.Store(1)
		} else {
			r.state.Store(2)
		}
		return c, nil
	}
	return cfg
}

func (r *certRecord) String() string {
	switch r.state.Load() {
	case 1:
		return "sent"
	case 2:
		return "none"
	}
	return "not requested by the server"
}

// explain adds to a TLS failure what the agent sent: with TLS 1.3 a server
// rejecting the client certificate surfaces only as a broken connection
// after the handshake. Failures to reach the server at all (refused, no
// such host, dial timeout) are returned as they are.
func (a *Agent) explain(err error, cert *certRecord) error {
	if a.opts.TLS == nil || status.Code(err) != codes.Unavailable || !tlsFailure(err.Error()) {
		return err
	}
	return fmt.Errorf("TLS connection to %s failed (client certificate: %s; a server requiring mTLS rejects agents without a valid one): %w",
		a.opts.ServerAddress, cert, err)
}

// tlsFailure tells a failure during or right after the TLS handshake
// from a failed TCP dial, by gRPC's error text.
func tlsFailure(msg string) bool {
	if strings.Contains(msg, "Error while dialing") {
		return false // the TCP connection was not made
	}
	for _, s := range []string{"tls:", "x509:", "authentication handshake failed", "certificate", "broken pipe", "connection reset", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (s *session) send(pkt *client.Packet) error { return s.sendMsg(pkt) }

// sendMsg is send for a *client.Packet or a *netproxy.OutData.
func (s *session) sendMsg(m any) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.a.m.counted(m, s.stream.SendMsg(m))
}

func (s *session) sendDrain() {
	s.drainOnce.Do(func() {
		if s.ln != nil {
			// The server chooses this agent for no new dials.
			if err := s.ln.GoAway(); err != nil {
				s.logger.V(2).Info("Sending GOAWAY failed", "err", err)
			}
			return
		}
		if err := s.send(netproxy.Drain()); err != nil {
			s.logger.V(2).Info("Sending DRAIN failed", "err", err)
		}
	})
}

func (s *session) close() { s.cancel() }

// probe drops the session when its transport is no longer usable, like
// upstream's --probe-interval: gRPC's connection state, or on
// portside-link/2 a ping the server answers.
func (s *session) probe() {
	t := time.NewTicker(s.a.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		var err error
		if s.ln != nil {
			err = s.pingLink()
		} else if st := s.cc.GetState(); st == connectivity.TransientFailure || st == connectivity.Shutdown {
			err = fmt.Errorf("connection state %s", st)
		}
		if err != nil && s.ctx.Err() == nil {
			s.logger.Info("Server connection unhealthy", "err", err)
			s.cancel()
			return
		}
	}
}

// serve reads the control stream until it ends.
func (s *session) serve() {
	defer func() {
		s.cancel()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.nc.Close()
		}
		s.mu.Unlock()
		_ = s.cc.Close()
		s.a.removeSession(s)
		close(s.done)
	}()
	for {
		var rp netproxy.Received
		err := netproxy.RecvPacket(s.stream, &rp)
		pkt := rp.Packet
		if err != nil {
			if err != io.EOF && s.ctx.Err() == nil {
				s.a.m.recvFailed(err)
				s.logger.Info("Server stream ended", "err", err)
			}
			return
		}
		s.a.m.packet(pkt.Type)
		switch pkt.Type {
		case client.PacketType_DIAL_REQ:
			if r := pkt.GetDialRequest(); r != nil {
				go s.dial(r)
			}
		case client.PacketType_DIAL_CLS:
			if r := pkt.GetCloseDial(); r != nil {
				s.mu.Lock()
				if cancel := s.dials[r.Random]; cancel != nil {
					cancel()
				}
				s.mu.Unlock()
			}
		case client.PacketType_DATA:
			s.writeMuxed(rp) // takes the buffer
			continue
		case client.PacketType_CLOSE_REQ:
			if r := pkt.GetCloseRequest(); r != nil {
				s.mu.Lock()
				c := s.conns[r.ConnectID]
				s.mu.Unlock()
				if c == nil {
					_ = s.send(netproxy.CloseRsp(r.ConnectID, "Unknown connectID"))
					continue
				}
				// The reader sees the close and answers CLOSE_RSP.
				_ = c.nc.Close()
			}
		default:
			s.logger.V(5).Info("Ignoring packet from server", "type", pkt.Type)
		}
		rp.Free()
	}
}

// writeMuxed hands DATA from a multiplexed stream to the connection's
// writer. The queue is short and bounded: a destination that stops
// reading stalls the shared stream after a few packets, as upstream's
// agent does (its --xfr-channel-size); streams-v1 exists to avoid that.
func (s *session) writeMuxed(rp netproxy.Received) {
	d := rp.GetData()
	if d == nil || d.ConnectID == 0 {
		rp.Free()
		return
	}
	s.mu.Lock()
	c := s.conns[d.ConnectID]
	s.mu.Unlock()
	if c == nil {
		rp.Free()
		_ = s.send(netproxy.CloseRsp(d.ConnectID, "unrecognized connectID"))
		return
	}
	select {
	case c.queue <- rp: // the writer frees it
	case <-c.done:
		rp.Free()
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
