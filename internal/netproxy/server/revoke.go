package server

import (
	"github.com/portside-io/portside/internal/netproxy"
)

// revokedMsg is what the frontend is told when its connection is closed
// because the agent carrying it no longer holds its destination.
const revokedMsg = "connection closed: the agent no longer holds its destination (its Node stopped listing the address or name, is deleted, or another Node lists it too)"

// revokeStale ends b's connections whose grant its identity no longer
// gives (StillRoutes): a name or address its Node stopped listing, or
// that another Node lists too, must not keep carrying traffic that was
// routed by it, or a stream opened before a contest was seen (an
// impostor that listed a node's address first, a machine replaced and its
// address reused) would outlive the decision. Called after b's identity
// changed; a dial that chose b before that is checked again by dial once
// it is pending, so none slips between the two.
//
// It runs on the Node informer's goroutine, so each connection is ended
// on a goroutine of its own: telling a frontend that stopped reading can
// wait (a gRPC stream's flow control) until its stream ends.
func (s *Server) revokeStale(b *backend) int {
	n := 0
	for _, c := range b.liveConns() {
		if s.backends.stillRoutes(b, c.strategy, c.address) {
			continue
		}
		c.revoked.Store(true)
		go s.revoke(c, revokedMsg)
		n++
	}
	if n > 0 {
		s.m.revoked.Add(float64(n))
	}
	return n
}

// revoke ends c whatever its state: a pending dial fails (and the agent is
// told to drop it), an established connection is closed on both sides. A
// dial whose answer is being delivered right now (taken from pending, or
// established but its frontend not yet told) is left to resolveOK, which
// sees revoked once it has told the frontend: a CLOSE must never reach a
// frontend before its DIAL_RSP.
func (s *Server) revoke(c *conn, msg string) {
	c.revoked.Store(true)
	state, connectID, ds := c.snapshot()
	switch state {
	case statePending:
		if c.be.takePendingIf(c) {
			s.m.dialFailed(failBackendClose)
			s.resolveFailed(c, msg)
			s.cancelAgentDial(c)
		}
	case stateEstablished:
		select {
		case <-c.dialDone:
		default:
			return // resolveOK closes dialDone, then reads revoked
		}
		if !c.finish() {
			return
		}
		s.connFinished()
		c.fe.closed(c, msg)
		c.closeDone()
		if ds == nil {
			// Multiplexed on the agent's stream: the agent closes its
			// socket on CLOSE_REQ; its CLOSE_RSP finds nothing to answer.
			c.be.takeConn(connectID)
			s.sendAgent(c.be, netproxy.CloseReq(connectID))
		}
	}
}
