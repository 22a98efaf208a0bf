package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Upstream reads each stream into a channel and counts, in
// full_receive_channels, the streams whose channel is full: the side it
// forwards to is not keeping up. Portside's readers hand each packet
// straight to the other side's writer, so the same state is a reader
// blocked in that hand-off; a stallGauge counts those blocked longer than
// stallAfter when /metrics is served (refresh), so the hot path costs two
// atomic stores.

const stallAfter = 100 * time.Millisecond

// Service methods, upstream's label values.
const (
	methodProxy   = "Proxy"   // a frontend's reader, blocked sending to an agent
	methodConnect = "Connect" // an agent's reader, blocked writing to a frontend
)

// handoff is one reader's hand-off in progress: its start in Unix
// nanoseconds, 0 when none.
type handoff struct{ since atomic.Int64 }

func (h *handoff) begin(now time.Time) { h.since.Store(now.UnixNano()) }
func (h *handoff) end()                { h.since.Store(0) }

type stallGauge struct {
	vec  *prometheus.GaugeVec
	now  func() time.Time
	mu   sync.Mutex
	live map[*handoff]string // service method
}

func newStallGauge(vec *prometheus.GaugeVec) *stallGauge {
	vec.WithLabelValues(methodProxy)
	vec.WithLabelValues(methodConnect)
	return &stallGauge{vec: vec, now: time.Now, live: map[*handoff]string{}}
}

// watch registers a reader's hand-offs until the returned func is called.
func (g *stallGauge) watch(method string) (*handoff, func()) {
	h := &handoff{}
	g.mu.Lock()
	g.live[h] = method
	g.mu.Unlock()
	return h, func() {
		g.mu.Lock()
		delete(g.live, h)
		g.mu.Unlock()
	}
}

// Stalled counts the readers of each method blocked over stallAfter.
func (g *stallGauge) Stalled() map[string]int {
	limit := g.now().Add(-stallAfter).UnixNano()
	out := map[string]int{methodProxy: 0, methodConnect: 0}
	g.mu.Lock()
	defer g.mu.Unlock()
	for h, m := range g.live {
		if s := h.since.Load(); s != 0 && s <= limit {
			out[m]++
		}
	}
	return out
}

// refresh sets the gauge to what Stalled counts now.
func (g *stallGauge) refresh() {
	for m, n := range g.Stalled() {
		g.vec.WithLabelValues(m).Set(float64(n))
	}
}
