package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strconv"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy"
)

// agentService implements AgentService for agents.
type agentService struct {
	agentpb.UnimplementedAgentServiceServer
	s *Server
}

// Connect serves an agent's control stream, or, when it names a dial, a
// streams-v1 per-connection stream.
func (a agentService) Connect(stream agentpb.AgentService_ConnectServer) error {
	s := a.s
	md, _ := metadata.FromIncomingContext(stream.Context())
	if len(md.Get(netproxy.HeaderDial)) > 0 {
		return s.serveDataStream(stream, md)
	}
	s.m.connectConns.Inc()
	defer s.m.connectConns.Dec()
	tk, b, logger, err := s.admitAgent(stream.Context(), md)
	if err != nil {
		return err
	}
	defer tk.done()
	b.stream = stream
	hdr := metadata.Pairs(header.ServerID, s.opts.ServerID, header.ServerCount, strconv.Itoa(s.serverCount()))
	if !s.opts.DisableStreams && contains(md.Get(netproxy.HeaderFeatures), netproxy.FeatureStreamsV1) {
		b.streamsV1 = true
		b.session = newSession()
		hdr.Append(netproxy.HeaderFeatures, netproxy.FeatureStreamsV1, netproxy.FeatureStreamsAck)
		hdr.Append(netproxy.HeaderSession, b.session)
	}
	if err := stream.SendHeader(hdr); err != nil {
		return err
	}
	defer s.attach(b, logger)()
	var rp netproxy.Received
	for {
		err := netproxy.RecvPacket(stream, &rp)
		if err != nil {
			s.m.streamError(segFromAgent, err, "")
			if err != io.EOF && status.Code(err) != codes.Canceled {
				logger.V(2).Info("Agent stream ended", "err", err)
			}
			return nil
		}
		s.m.packet(segFromAgent, rp.Type)
		s.handleAgentPacket(b, &rp)
		rp.Free()
	}
}

// admitAgent admits, authenticates and names an agent, the same for the
// gRPC link and portside-link/2: ctx carries the peer (its verified TLS
// state) and md the agent's claims and token. The errors are gRPC
// statuses; the caller must call the ticket's done.
func (s *Server) admitAgent(ctx context.Context, md metadata.MD) (*ticket, *backend, logr.Logger, error) {
	// Admission comes first: a stream refused here has cost a map lookup,
	// not a TokenReview.
	tk, reason, err := s.admission.admit(ctx, s.opts.StreamLimits)
	if err != nil {
		s.m.streamsRefused.WithLabelValues(reason).Inc()
		s.logger.V(2).Info("Agent stream refused", "reason", reason, "err", err)
		return nil, nil, logr.Logger{}, err
	}
	fail := func(err error) (*ticket, *backend, logr.Logger, error) {
		tk.done()
		return nil, nil, logr.Logger{}, err
	}
	agentID := first(md.Get(header.AgentID))
	if agentID == "" {
		return fail(status.Error(codes.InvalidArgument, "missing agentID in metadata"))
	}
	logger := s.logger.WithValues("agentID", agentID)
	ids, err := header.GenAgentIdentifiers(first(md.Get(header.AgentIdentifiers)))
	if err != nil {
		return fail(status.Errorf(codes.InvalidArgument, "bad agentIdentifiers: %v", err))
	}
	principal, err := s.authenticate(ctx, md)
	if err != nil {
		if IsUnavailable(err) {
			// Nothing is known about the token: the agent should retry.
			logger.V(2).Info("Agent authentication unavailable", "err", err)
			return fail(status.Errorf(codes.Unavailable, "agent authentication unavailable: %v", err))
		}
		// V(2): a flood of junk tokens must not flood the log; the denials
		// are counted (portside_token_reviews_total{result="denied"}).
		logger.V(2).Info("Agent authentication failed", "err", err)
		return fail(status.Errorf(codes.Unauthenticated, "agent authentication failed: %v", err))
	}
	tk.authenticatedNow()
	logger = logger.WithValues("user", principal.User, "node", principal.Node)
	id, denied := s.decideIdentity(logger, agentID, principal, ids)
	s.reportDenials(logger, agentID, principal, denied)
	b := &backend{id: id, denied: denied, principal: principal, claims: ids, ctx: ctx,
		pending: map[int64]*conn{}, conns: map[int64]*conn{}}
	return tk, b, logger, nil
}

// attach makes b a backend dials may choose, and returns what takes it
// away again: every dial still pending on it fails, every connection on
// it is closed.
func (s *Server) attach(b *backend, logger logr.Logger) (detach func()) {
	n := s.backends.add(b)
	if b.principal.Node != "" {
		// The Node may have changed between the decision and add, unseen
		// by nodeChanged.
		s.redecide(b)
	}
	s.backendsChanged(n, b, 1)
	logger.V(2).Info("Agent connected", "streamsV1", b.streamsV1, "link", b.link != nil, "agents", n)
	return func() {
		n := s.backends.remove(b)
		s.backendsChanged(n, b, -1)
		pending, established := b.shutdown()
		for _, c := range pending {
			s.m.dialFailed(failBackendClose)
			s.resolveFailed(c, "agent disconnected before the dial completed")
		}
		for _, c := range established {
			if c.finish() {
				s.connFinished()
				c.fe.closed(c, "agent disconnected")
				c.closeDone()
			}
		}
		logger.V(2).Info("Agent disconnected", "agents", n, "abandonedDials", len(pending), "closedConnections", len(established))
	}
}

// handleAgentPacket applies one packet from an agent's control stream.
// Frontend writes happen inline: for multiplexed agents that is upstream's
// semantics (and its head-of-line blocking), for streams-v1 agents only
// dial failures arrive here. rp's payload is valid until it returns.
func (s *Server) handleAgentPacket(b *backend, rp *netproxy.Received) {
	pkt := rp.Packet
	switch pkt.Type {
	case client.PacketType_DIAL_RSP:
		r := pkt.GetDialResponse()
		if r == nil {
			return
		}
		c := b.takePending(r.Random)
		if c == nil {
			s.m.dialFailed(failUnrecognized)
			if r.ConnectID != 0 {
				// The frontend gave up; the agent holds a connection nobody will use.
				s.sendAgent(b, netproxy.CloseReq(r.ConnectID))
			}
			return
		}
		if r.Error != "" {
			s.m.dialFailed(failErrorResponse)
			s.resolveFailed(c, r.Error)
			return
		}
		if b.streamsV1 {
			// A streams-v1 agent answers success on the connection's own
			// stream, unless one of its streams reached a server that did
			// not know its session (an L7 proxy in between): then it falls
			// back to carrying connections here, as an upstream agent
			// (it logs that once).
			s.logger.V(4).Info("Streams-v1 agent carries a connection on its control stream", "agentID", b.id.AgentID)
		}
		c.establish(r.ConnectID, nil)
		if !b.addConn(c) {
			s.resolveFailed(c, "agent disconnected")
			return
		}
		s.resolveOK(c)
	case client.PacketType_DIAL_CLS:
		r := pkt.GetCloseDial()
		if r == nil {
			return
		}
		if c := b.takePending(r.Random); c != nil {
			s.m.dialFailed(failBackendClose)
			s.resolveFailed(c, "dial closed by agent")
		}
	case client.PacketType_DATA:
		d := pkt.GetData()
		if d == nil || d.ConnectID == 0 {
			return
		}
		c := b.getConn(d.ConnectID)
		if c == nil {
			s.sendAgent(b, netproxy.CloseReq(d.ConnectID))
			return
		}
		s.m.packet(segToClient, pkt.Type)
		if err := c.fe.data(rp); err != nil {
			// The frontend is gone; have the agent close its end.
			s.sendAgent(b, netproxy.CloseReq(d.ConnectID))
		}
	case client.PacketType_CLOSE_RSP:
		r := pkt.GetCloseResponse()
		if r == nil {
			return
		}
		if c := b.takeConn(r.ConnectID); c != nil && c.finish() {
			s.connFinished()
			c.fe.closed(c, r.Error)
			c.closeDone()
		}
	case client.PacketType_DRAIN:
		if !b.draining.Swap(true) {
			s.logger.V(2).Info("Agent is draining", "agentID", b.id.AgentID)
		}
	default:
		s.logger.V(5).Info("Ignoring packet from agent", "type", pkt.Type, "agentID", b.id.AgentID)
	}
}

func (s *Server) sendAgent(b *backend, pkt *client.Packet) {
	s.m.packet(segToAgent, pkt.Type)
	if err := b.send(pkt); err != nil {
		s.m.streamError(segToAgent, err, pkt.Type.String())
		s.logger.V(4).Info("Send to agent failed", "agentID", b.id.AgentID, "type", pkt.Type, "err", err)
	}
}

// serveDataStream serves a streams-v1 per-connection stream: the first
// packet is the DIAL_RSP, then DATA from the agent until CLOSE_RSP. The
// receive loop runs apart from the handler so that the handler can return,
// and so reset the stream, when the frontend side ends first; otherwise a
// close would have to queue behind data the destination is not reading.
func (s *Server) serveDataStream(stream agentpb.AgentService_ConnectServer, md metadata.MD) error {
	token := first(md.Get(netproxy.HeaderSession))
	b := s.backends.session(token)
	if b == nil {
		return status.Error(codes.PermissionDenied, "unknown or expired proxy session")
	}
	// The acknowledgement (FeatureStreamsAck): the agent sends the dial's
	// answer only on a stream that reached the server holding its session.
	if err := stream.SendHeader(metadata.Pairs(netproxy.HeaderSession, token)); err != nil {
		return nil
	}
	random, err := strconv.ParseInt(first(md.Get(netproxy.HeaderDial)), 10, 64)
	if err != nil {
		return status.Error(codes.InvalidArgument, "malformed dial id")
	}
	pkt, err := stream.Recv()
	if err != nil {
		return nil
	}
	r := pkt.GetDialResponse()
	if pkt.Type != client.PacketType_DIAL_RSP || r == nil || r.Random != random {
		return status.Error(codes.InvalidArgument, "a connection stream must start with its DIAL_RSP")
	}
	s.m.packet(segFromAgent, pkt.Type)
	c := b.takePending(random)
	if c == nil {
		s.m.dialFailed(failUnrecognized)
		return status.Error(codes.NotFound, "dial no longer pending")
	}
	if r.Error != "" {
		s.m.dialFailed(failErrorResponse)
		s.resolveFailed(c, r.Error)
		return nil
	}
	ds := &dataStream{stream: stream}
	c.establish(r.ConnectID, ds)
	if !s.resolveOK(c) {
		return nil
	}
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.pumpFromAgent(c, stream)
	}()
	select {
	case <-loopDone:
	case <-c.abort:
	}
	return nil
}

// pumpFromAgent moves one connection's packets from its stream to the
// frontend; a blocked frontend blocks only this stream.
func (s *Server) pumpFromAgent(c *conn, stream agentpb.AgentService_ConnectServer) {
	var rp netproxy.Received
	defer rp.Free()
	for {
		rp.Free() // the previous packet was consumed synchronously
		err := netproxy.RecvPacket(stream, &rp)
		pkt := rp.Packet
		if err != nil {
			s.m.streamError(segFromAgent, err, "")
			if c.finish() {
				s.connFinished()
				c.fe.closed(c, "agent connection lost")
				c.closeDone()
			}
			return
		}
		s.m.packet(segFromAgent, pkt.Type)
		switch pkt.Type {
		case client.PacketType_DATA:
			s.m.packet(segToClient, pkt.Type)
			if err := c.fe.data(&rp); err != nil {
				if c.finish() {
					s.connFinished()
					c.closeDone()
				}
				return
			}
		case client.PacketType_CLOSE_RSP:
			msg := ""
			if r := pkt.GetCloseResponse(); r != nil {
				msg = r.Error
			}
			if c.finish() {
				s.connFinished()
				c.fe.closed(c, msg)
				c.closeDone()
			}
			return
		}
	}
}

func newSession() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
