package server

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/metadata"

	"github.com/portside-io/portside/internal/netproxy"
)

// recFE is a frontend that records what it was told, in order.
type recFE struct {
	mu  sync.Mutex
	log []string
}

func (f *recFE) add(s string) { f.mu.Lock(); f.log = append(f.log, s); f.mu.Unlock() }
func (f *recFE) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}
func (f *recFE) dialed(*conn) error              { f.add("dialed"); return nil }
func (f *recFE) dialFailed(*conn, string)        { f.add("dialFailed") }
func (f *recFE) data(*netproxy.Received) error   { return nil }
func (f *recFE) dataOut(*netproxy.OutData) error { return nil }
func (f *recFE) closed(*conn, string)            { f.add("closed") }
func (f *recFE) kind() string                    { return "test" }

// revokeTestBackend is a multiplexed agent holding host=node-a and
// ipv4=10.0.0.1, registered with s.
func revokeTestBackend(t *testing.T, s *Server) *backend {
	t.Helper()
	id := routeAgents(t, []string{"host=node-a&ipv4=10.0.0.1"})[0]
	b := &backend{id: id, stream: newFakeStream(metadata.MD{}), ctx: context.Background(),
		pending: map[int64]*conn{}, conns: map[int64]*conn{}}
	s.backends.add(b)
	return b
}

// takeAddress is a Node change that takes 10.0.0.1 from b, as redecide's
// setIdentity does.
func takeAddress(t *testing.T, s *Server, b *backend) {
	t.Helper()
	id := routeAgents(t, []string{"host=node-a&ipv4=10.0.0.2"})[0]
	b.id.Hosts, b.id.CIDRs = id.Hosts, id.CIDRs
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestRevokeDuringDialRecheck: a dial chose its agent, then a Node change
// took the address and its revocation found the dial pending and failed
// it, before the dial's own re-check ran. The frontend is answered once,
// and pending_backend_dials ends at 0.
func TestRevokeDuringDialRecheck(t *testing.T) {
	s := newTestServer(Options{Strategies: []Strategy{StrategyDestHost}})
	b := revokeTestBackend(t, s)
	fe := &recFE{}
	b.mu.Lock() // dial stops in addPending, after choose
	errc := make(chan error, 1)
	go func() { _, err := s.dial(fe, 1, "tcp", "10.0.0.1:10250"); errc <- err }()
	time.Sleep(100 * time.Millisecond)
	s.backends.mu.Lock() // dial then stops at its re-check
	b.mu.Unlock()
	var c *conn
	for deadline := time.Now().Add(5 * time.Second); c == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the dial never became pending")
		}
		b.mu.Lock()
		c = b.pending[1]
		b.mu.Unlock()
	}
	takeAddress(t, s, b) // under registry.mu, as setIdentity
	s.revoke(c, revokedMsg)
	s.backends.mu.Unlock()
	err := <-errc
	if got := fe.got(); len(got) != 1 || got[0] != "dialFailed" || err != nil {
		t.Errorf("frontend told %v, dial returned %v; want one dialFailed and no error (answered once)", got, err)
	}
	if g := gaugeValue(t, s.m.pendingDials); g != 0 {
		t.Errorf("pending_backend_dials = %v, want 0", g)
	}
}

// TestRevokeBetweenEstablishAndDialed: the agent's answer established the
// connection, and a revocation came before the frontend was told. The
// frontend sees its DIAL_RSP, then the close; never a close first.
func TestRevokeBetweenEstablishAndDialed(t *testing.T) {
	s := newTestServer(Options{Strategies: []Strategy{StrategyDestHost}})
	b := revokeTestBackend(t, s)
	fe := &recFE{}
	c := newConn(7, "10.0.0.1:10250", StrategyDestHost, fe, b, s.m)
	if !b.addPending(c) {
		t.Fatal("addPending")
	}
	s.m.pendingDials.Inc()
	b.takePending(7) // what handling the agent's DIAL_RSP does
	c.establish(99, nil)
	b.addConn(c)
	takeAddress(t, s, b)
	s.revoke(c, revokedMsg) // revokeStale's goroutine, in the window
	s.resolveOK(c)
	if got := fe.got(); !slices.Equal(got, []string{"dialed", "closed"}) {
		t.Errorf("frontend told %v, want [dialed closed]", got)
	}
	if st, _, _ := c.snapshot(); st != stateFinished {
		t.Errorf("connection state %v after revocation, want finished", st)
	}
	if g := gaugeValue(t, s.m.established); g != 0 {
		t.Errorf("established_connections = %v, want 0", g)
	}
	if n := len(b.liveConns()); n != 0 {
		t.Errorf("%d connections still live on the agent", n)
	}
}

// TestRevokePendingDial: a dial pending on the agent when its address is
// taken fails at once (the frontend is told, the agent told to drop it),
// and what still routes is left alone.
func TestRevokePendingDial(t *testing.T) {
	s := newTestServer(Options{Strategies: []Strategy{StrategyDestHost}})
	b := revokeTestBackend(t, s)
	stale, kept := &recFE{}, &recFE{}
	if _, err := s.dial(stale, 1, "tcp", "10.0.0.1:10250"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dial(kept, 2, "tcp", "node-a:10250"); err != nil {
		t.Fatal(err)
	}
	s.backends.mu.Lock()
	takeAddress(t, s, b)
	s.backends.mu.Unlock()
	if n := s.revokeStale(b); n != 1 {
		t.Fatalf("revokeStale revoked %d connections, want 1", n)
	}
	for deadline := time.Now().Add(5 * time.Second); len(stale.got()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the revoked dial was never answered")
		}
	}
	if got := stale.got(); !slices.Equal(got, []string{"dialFailed"}) {
		t.Errorf("revoked dial's frontend told %v, want [dialFailed]", got)
	}
	if got := kept.got(); len(got) != 0 {
		t.Errorf("the dial by name (still held) was told %v", got)
	}
	if p := b.stream.(*fakeStream).lastSent(netproxy.DialCls(1).Type); p == nil || p.GetCloseDial().GetRandom() != 1 {
		t.Errorf("the agent was not told to drop the revoked dial: last DIAL_CLS %v", p)
	}
	if g := gaugeValue(t, s.m.pendingDials); g != 1 {
		t.Errorf("pending_backend_dials = %v, want 1 (the dial by name)", g)
	}
}
