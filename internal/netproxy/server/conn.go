package server

import (
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/portside-io/portside/internal/netproxy"
)

// frontend is where a proxied connection's answers go: a ProxyService
// stream (kube-apiserver's konnectivity client) or a hijacked HTTP CONNECT
// connection. Calls come from the goroutine that reads the agent side, in
// protocol order, so dialed always precedes the first data.
type frontend interface {
	dialed(c *conn) error
	dialFailed(c *conn, msg string)
	// data sends a DATA packet; msg's payload is valid until it returns.
	data(msg *netproxy.Received) error
	// dataOut sends a DATA packet from a pooled buffer (a portside-link/2
	// connection's bytes); the caller frees it after.
	dataOut(o *netproxy.OutData) error
	closed(c *conn, msg string)
	kind() string
}

type connState int

const (
	statePending connState = iota
	stateEstablished
	stateFinished
)

// conn is one proxied connection on the server. Removing it from its
// backend's pending map is what entitles a goroutine to resolve the dial,
// so a DIAL_RSP, a dial timeout, a DIAL_CLS and an agent going away can
// race without double answers to the frontend.
type conn struct {
	random  int64
	address string
	// strategy chose be for address: the grant this connection holds
	// (StillRoutes).
	strategy Strategy
	// revoked is set when be's grant for address is gone; whoever
	// establishes the connection after that ends it (revoke.go).
	revoked atomic.Bool
	fe      frontend
	be      *backend
	m       *metrics
	start   time.Time
	timer   *time.Timer
	// cancelDial abandons a portside-link/2 dial (the link's own close
	// of the pending stream), where the gRPC link sends DIAL_CLS.
	cancelDial func()

	mu        sync.Mutex
	state     connState
	connectID int64
	ds        connStream // this connection's own stream (streams-v1 or portside-link/2); nil multiplexed

	dialDone  chan struct{} // closed once the dial is resolved either way
	done      chan struct{} // closed once finished
	abort     chan struct{} // closed to make the data stream handler return
	abortOnce sync.Once
	doneOnce  sync.Once
}

func newConn(random int64, address string, strategy Strategy, fe frontend, be *backend, m *metrics) *conn {
	return &conn{random: random, address: address, strategy: strategy, fe: fe, be: be, m: m, start: time.Now(),
		dialDone: make(chan struct{}), done: make(chan struct{}), abort: make(chan struct{})}
}

// establish moves a pending connection to established; the caller owns
// the resolution (it took c out of the pending map).
func (c *conn) establish(connectID int64, ds connStream) {
	c.mu.Lock()
	c.state = stateEstablished
	c.connectID = connectID
	c.ds = ds
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
}

// fail resolves a pending connection as failed.
func (c *conn) fail() {
	c.mu.Lock()
	c.state = stateFinished
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.be.forget(c)
	c.closeDone()
}

// finish ends an established connection; only the first caller gets true
// and must tell the frontend, then call closeDone.
func (c *conn) finish() bool {
	c.mu.Lock()
	if c.state != stateEstablished {
		c.mu.Unlock()
		return false
	}
	c.state = stateFinished
	ds := c.ds
	c.mu.Unlock()
	c.be.forget(c)
	c.doAbort()
	if ds != nil {
		// Outside c.mu: a link stream's close may wait for room on the link.
		ds.abort()
	}
	return true
}

// closeDone signals the frontend handler waiting after its CLOSE_REQ; it
// comes after the frontend was answered, or the handler's return would
// end the stream before the CLOSE_RSP is on it.
func (c *conn) closeDone() { c.doneOnce.Do(func() { close(c.done) }) }

func (c *conn) doAbort() { c.abortOnce.Do(func() { close(c.abort) }) }

func (c *conn) snapshot() (connState, int64, connStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.connectID, c.ds
}

// toAgent sends a frontend packet (DATA, CLOSE_REQ) the agent's way: on
// the connection's own stream, or multiplexed on the agent's stream. pkt
// is a *client.Packet or a *netproxy.Received (forwarded as received).
func (c *conn) toAgent(pkt any) error {
	_, _, ds := c.snapshot()
	var err error
	if ds != nil {
		err = ds.send(pkt)
	} else {
		err = c.be.send(pkt)
	}
	if err != nil {
		c.m.streamError(segToAgent, err, packetTypeOf(pkt))
	}
	return err
}

// packetTypeOf names a packet handed to a stream; what is neither a
// *client.Packet nor a *netproxy.Received is a DATA packet in its buffer.
func packetTypeOf(pkt any) string {
	switch p := pkt.(type) {
	case *client.Packet:
		return p.Type.String()
	case *netproxy.Received:
		return p.Type.String()
	}
	return client.PacketType_DATA.String()
}

// connStream is a connection's own stream to its agent.
type connStream interface {
	// send sends a frontend packet (DATA or CLOSE_REQ): a *client.Packet,
	// a *netproxy.Received or a *netproxy.OutData.
	send(pkt any) error
	// abort ends the stream once the connection is finished.
	abort()
}

// dataStream is the server end of a streams-v1 per-connection stream.
// Its handler returns, and so resets the stream, on the conn's abort.
type dataStream struct {
	mu     sync.Mutex
	stream agentpb.AgentService_ConnectServer
}

func (d *dataStream) abort() {}

func (d *dataStream) send(pkt any) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stream.SendMsg(pkt)
}
