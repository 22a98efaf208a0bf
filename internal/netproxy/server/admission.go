package server

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// admission counts the agent control streams per gRPC connection and the
// streams per peer address still being authenticated, for admitStream.
type admission struct {
	mu      sync.Mutex
	perConn map[string]int
	perPeer map[string]int
}

// ticket is an admitted stream's place in the counts.
type ticket struct {
	a             *admission
	conn, peer    string
	authenticated bool
}

// admit counts a new control stream on ctx's connection, or refuses it
// (reason and a ResourceExhausted error).
func (a *admission) admit(ctx context.Context, limits StreamLimits) (*ticket, string, error) {
	conn, peerKey := "", ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		// A TCP connection's remote address is unique while it lives; its
		// host is the peer.
		conn = p.Addr.String()
		peerKey = conn
		if h, _, err := net.SplitHostPort(conn); err == nil {
			peerKey = h
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.perConn == nil {
		a.perConn, a.perPeer = map[string]int{}, map[string]int{}
	}
	if reason, err := admitStream(limits, a.perConn[conn], a.perPeer[peerKey]); err != nil {
		return nil, reason, err
	}
	a.perConn[conn]++
	a.perPeer[peerKey]++
	return &ticket{a: a, conn: conn, peer: peerKey}, "", nil
}

// authenticatedNow stops counting the stream against its peer's
// unauthenticated streams.
func (t *ticket) authenticatedNow() {
	t.a.mu.Lock()
	defer t.a.mu.Unlock()
	if !t.authenticated {
		t.authenticated = true
		decr(t.a.perPeer, t.peer)
	}
}

// done releases the stream's counts.
func (t *ticket) done() {
	t.a.mu.Lock()
	defer t.a.mu.Unlock()
	decr(t.a.perConn, t.conn)
	if !t.authenticated {
		t.authenticated = true
		decr(t.a.perPeer, t.peer)
	}
}

func decr(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}
