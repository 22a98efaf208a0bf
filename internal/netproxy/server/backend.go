package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy/link"
)

// backend is one agent's control stream to this server. An upstream agent
// multiplexes every connection on it; a streams-v1 agent receives only
// DIAL_REQ/DIAL_CLS here and answers successful dials on streams of their own.
type backend struct {
	// id's routing fields (Hosts, CIDRs, DefaultRoute) and denied change
	// when the agent's Node does, under registry.mu.
	id        Identity
	denied    []Denial
	principal Principal
	claims    header.Identifiers
	streamsV1 bool
	session   string
	stream    agentpb.AgentService_ConnectServer // the gRPC link
	link      *link.Session                      // or portside-link/2
	ctx       context.Context
	draining  atomic.Bool

	sendMu sync.Mutex

	mu      sync.Mutex
	closed  bool
	pending map[int64]*conn // by DialRequest.random
	conns   map[int64]*conn // established, by connectID; multiplexed (upstream) agents only
	// live is every connection on this agent from its dial until it is
	// finished or failed, whatever the protocol: what a revocation of
	// the agent's identifiers must look through (revoke.go).
	live map[*conn]struct{}
}

// send sends a *client.Packet or a *netproxy.Received.
func (b *backend) send(pkt any) error {
	if b.link != nil {
		// Dials and closes on portside-link/2 are frames of their own
		// (linkDial, linkStream); nothing is sent as a packet.
		return errors.New("no packets on a portside-link/2 agent")
	}
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	return b.stream.SendMsg(pkt)
}

func (b *backend) addPending(c *conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if _, dup := b.pending[c.random]; dup {
		return false
	}
	b.pending[c.random] = c
	if b.live == nil {
		b.live = map[*conn]struct{}{}
	}
	b.live[c] = struct{}{}
	return true
}

// forget drops a finished or failed connection from live.
func (b *backend) forget(c *conn) {
	b.mu.Lock()
	delete(b.live, c)
	b.mu.Unlock()
}

// liveConns is every connection on b not yet finished or failed.
func (b *backend) liveConns() []*conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*conn, 0, len(b.live))
	for c := range b.live {
		out = append(out, c)
	}
	return out
}

// takePending removes and returns the pending dial; whoever gets it
// resolves it.
func (b *backend) takePending(random int64) *conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.pending[random]
	if c != nil {
		delete(b.pending, random)
	}
	return c
}

// takePendingIf removes the pending dial only if it is c (a frontend
// abandoning its own dial must not cancel another frontend's same random).
func (b *backend) takePendingIf(c *conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending[c.random] != c {
		return false
	}
	delete(b.pending, c.random)
	return true
}

func (b *backend) addConn(c *conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c.connectID] = c
	return true
}

func (b *backend) getConn(connectID int64) *conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns[connectID]
}

func (b *backend) takeConn(connectID int64) *conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.conns[connectID]
	delete(b.conns, connectID)
	return c
}

// shutdown marks the backend gone and hands back everything still tied to
// its stream.
func (b *backend) shutdown() (pending, established []*conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for k, c := range b.pending {
		pending = append(pending, c)
		delete(b.pending, k)
	}
	for k, c := range b.conns {
		established = append(established, c)
		delete(b.conns, k)
	}
	return pending, established
}

// registry holds the connected backends.
type registry struct {
	mu        sync.RWMutex
	list      []*backend
	bySession map[string]*backend
	// byNode: the backends bound to each node (principal.Node).
	byNode map[string][]*backend
	ready  readyCounter
}

func (r *registry) add(b *backend) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, b)
	if n := b.principal.Node; n != "" {
		if r.byNode == nil {
			r.byNode = map[string][]*backend{}
		}
		r.byNode[n] = append(r.byNode[n], b)
	}
	r.ready.add(&b.id)
	if b.session != "" {
		r.bySession[b.session] = b
	}
	return len(r.list)
}

func (r *registry) remove(b *backend) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.list {
		if x == b {
			r.list = append(r.list[:i:i], r.list[i+1:]...)
			r.ready.remove(&b.id)
			break
		}
	}
	if b.session != "" {
		delete(r.bySession, b.session)
	}
	if n := b.principal.Node; n != "" {
		r.byNode[n] = slices.DeleteFunc(r.byNode[n], func(x *backend) bool { return x == b })
		if len(r.byNode[n]) == 0 {
			delete(r.byNode, n)
		}
	}
	return len(r.list)
}

// onNode is the backends bound to node.
func (r *registry) onNode(node string) []*backend {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.byNode[node])
}

func (r *registry) snapshot() []*backend {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*backend(nil), r.list...)
}

// setIdentity replaces b's routing claims and denials; it reports whether
// they changed.
func (r *registry) setIdentity(b *backend, id Identity, denied []Denial) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reflect.DeepEqual(b.id.Hosts, id.Hosts) && reflect.DeepEqual(b.id.CIDRs, id.CIDRs) &&
		b.id.DefaultRoute == id.DefaultRoute && reflect.DeepEqual(b.denied, denied) {
		return false
	}
	if slices.Contains(r.list, b) {
		r.ready.remove(&b.id)
		defer r.ready.add(&b.id)
	}
	b.id.Hosts, b.id.CIDRs, b.id.DefaultRoute, b.denied = id.Hosts, id.CIDRs, id.DefaultRoute, denied
	return true
}

// stillRoutes reports whether b still holds the grant strategy s gave it
// for address, under the identity it has now.
func (r *registry) stillRoutes(b *backend, s Strategy, address string) bool {
	if s == StrategyDefault {
		return true // any agent serves it: no identity to read (every dial asks)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return StillRoutes(s, address, &b.id)
}

// readyCounts is ready_backends for strategies.
func (r *registry) readyCounts(strategies []Strategy) map[Strategy]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.ready.counts(strategies)
}

func (r *registry) session(tok string) *backend {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bySession[tok]
}

func (r *registry) len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.list)
}

func (r *registry) links() (n int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, b := range r.list {
		if b.link != nil {
			n++
		}
	}
	return n
}

func (r *registry) streamsV1() (n int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, b := range r.list {
		if b.streamsV1 {
			n++
		}
	}
	return n
}

// choose applies the routing decision to the current backends.
func (r *registry) choose(strategies []Strategy, address string) (*backend, Strategy) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ids := make([]Identity, len(r.list))
	for i, b := range r.list {
		ids[i] = b.id
		ids[i].Draining = b.draining.Load() || (b.link != nil && b.link.PeerGoneAway())
	}
	i, s := Choose(strategies, address, ids, rand.IntN)
	if i < 0 {
		return nil, ""
	}
	return r.list[i], s
}
