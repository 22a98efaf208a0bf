package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
)

// dial registers a dial for fe on a chosen agent and sends the DIAL_REQ.
// The answer reaches fe through its dialed/dialFailed callbacks.
func (s *Server) dial(fe frontend, random int64, protocol, address string) (*conn, error) {
	if s.stopping.Load() {
		return nil, errors.New("proxy server is shutting down")
	}
	// The protocol (tcp, udp, …) goes to the agent as sent, as upstream's
	// server forwards the DIAL_REQ: the agent dials it, or answers why not.
	if address == "" {
		return nil, errors.New("empty dial address")
	}
	b, strategy := s.backends.choose(s.opts.Strategies, address)
	if b == nil {
		s.m.dialFailed(failNoAgent)
		return nil, ErrNoAgent
	}
	c := newConn(random, address, strategy, fe, b, s.m)
	var dialCtx context.Context
	if b.link != nil {
		dialCtx, c.cancelDial = context.WithCancel(b.ctx)
	}
	if !b.addPending(c) {
		if c.cancelDial != nil {
			c.cancelDial()
		}
		return nil, errors.New("agent unavailable or duplicate dial id")
	}
	s.m.pendingDials.Inc()
	// b was chosen before it was pending: a revocation in between did not
	// see this dial, so it is checked again now that one would. One that
	// did see it may have answered it already (revoke took it): then it is
	// the frontend's as any failed dial, not refused a second time.
	if !s.backends.stillRoutes(b, strategy, address) {
		if !b.takePendingIf(c) {
			return c, nil
		}
		s.m.pendingDials.Dec()
		c.fail()
		if c.cancelDial != nil {
			c.cancelDial()
		}
		s.m.dialFailed(failNoAgent)
		return nil, ErrNoAgent
	}
	if t := s.opts.BackendDialTimeout; t > 0 {
		c.mu.Lock()
		c.timer = time.AfterFunc(t, func() {
			if b.takePendingIf(c) {
				s.m.dialFailed(failTimeout)
				s.resolveFailed(c, fmt.Sprintf("dial timeout: agent %s did not answer the dial to %s within %s", b.id.AgentID, address, t))
				s.cancelAgentDial(c)
			}
		})
		c.mu.Unlock()
	}
	if b.link != nil {
		go s.linkDial(b, c, dialCtx, protocol, address)
		return c, nil
	}
	s.m.packet(segToAgent, client.PacketType_DIAL_REQ)
	if err := b.send(netproxy.DialReq(random, protocol, address)); err != nil {
		s.m.streamError(segToAgent, err, client.PacketType_DIAL_REQ.String())
		if b.takePendingIf(c) {
			s.m.dialFailed(failBackendClose)
			s.resolveFailed(c, "sending the dial to the agent failed: "+err.Error())
		}
	}
	return c, nil
}

// resolveOK tells the frontend its dial succeeded; false when the frontend
// is already gone (the connection is then closed).
func (s *Server) resolveOK(c *conn) bool {
	s.m.pendingDials.Dec()
	s.m.dialOK(c.start)
	s.m.established.Inc()
	s.liveConn.Add(1)
	err := c.fe.dialed(c)
	close(c.dialDone)
	if err == nil && c.revoked.Load() {
		// Revoked while its answer was on the way (revoke.go): the
		// revocation saw it pending and could not end it.
		s.revoke(c, revokedMsg)
		return false
	}
	if err != nil {
		s.m.dialFailed(failSendResponse)
		if c.finish() {
			s.connFinished()
			c.closeDone()
		}
		if _, id, ds := c.snapshot(); ds == nil {
			c.be.takeConn(id)
			s.sendAgent(c.be, netproxy.CloseReq(id))
		}
		return false
	}
	return true
}

func (s *Server) resolveFailed(c *conn, msg string) {
	s.m.pendingDials.Dec()
	c.fail()
	c.fe.dialFailed(c, msg)
	close(c.dialDone)
}

func (s *Server) connFinished() {
	s.m.established.Dec()
	s.liveConn.Add(-1)
}

// abandonDial handles a frontend that gave up on a pending dial.
func (s *Server) abandonDial(c *conn) {
	if !c.be.takePendingIf(c) {
		return
	}
	s.m.pendingDials.Dec()
	s.m.dialFailed(failFrontendClose)
	c.fail()
	close(c.dialDone)
	s.cancelAgentDial(c)
}

// cancelAgentDial tells the agent a pending dial is abandoned: DIAL_CLS
// on the gRPC link; on portside-link/2, the dial's context ends and the
// link closes the stream (the agent closes what it opens late).
func (s *Server) cancelAgentDial(c *conn) {
	if c.cancelDial != nil {
		c.cancelDial()
		return
	}
	s.sendAgent(c.be, netproxy.DialCls(c.random))
}

// closeFromFrontend handles CLOSE_REQ. On a connection's own stream the
// server answers at once and resets the stream (the agent closes its
// socket when the stream ends); multiplexed, the agent answers.
func (s *Server) closeFromFrontend(c *conn) {
	state, connectID, ds := c.snapshot()
	if state != stateEstablished {
		return
	}
	if ds != nil {
		if c.finish() {
			s.connFinished()
			c.fe.closed(c, "")
			c.closeDone()
		}
		return
	}
	s.m.packet(segToAgent, client.PacketType_CLOSE_REQ)
	if err := c.be.send(netproxy.CloseReq(connectID)); err != nil {
		s.m.streamError(segToAgent, err, client.PacketType_CLOSE_REQ.String())
		if c.be.takeConn(connectID) != nil && c.finish() {
			s.connFinished()
			c.fe.closed(c, "agent connection lost")
			c.closeDone()
		}
	}
}

// frontendGone handles a frontend that disappeared without closing.
func (s *Server) frontendGone(c *conn) {
	state, connectID, ds := c.snapshot()
	switch {
	case state == statePending:
		s.abandonDial(c)
	case state == stateEstablished && ds != nil:
		if c.finish() {
			s.connFinished()
			c.closeDone()
		}
	case state == stateEstablished:
		s.sendAgent(c.be, netproxy.CloseReq(connectID))
	}
}
