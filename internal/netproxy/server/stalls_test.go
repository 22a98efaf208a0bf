package server

import (
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStallGauge(t *testing.T) {
	g := newStallGauge(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "full_receive_channels"}, []string{"service_method"}))
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	p1, _ := g.watch(methodProxy)
	p2, _ := g.watch(methodProxy)
	c1, unwatch := g.watch(methodConnect)
	c2, _ := g.watch(methodConnect)
	p1.begin(now.Add(-time.Second))    // blocked a second: counts
	p2.begin(now.Add(-stallAfter / 2)) // a write in progress: does not
	c1.begin(now.Add(-stallAfter))     // exactly the threshold: counts
	c2.begin(now.Add(-time.Second))
	c2.end() // done
	want := map[string]int{methodProxy: 1, methodConnect: 1}
	if got := g.Stalled(); !maps.Equal(got, want) {
		t.Fatalf("Stalled = %v; want %v", got, want)
	}
	unwatch() // its stream ended: c1 is gone
	want[methodConnect] = 0
	if got := g.Stalled(); !maps.Equal(got, want) {
		t.Fatalf("Stalled after the stream ended = %v; want %v", got, want)
	}
	g.refresh()
	if got := testutil.ToFloat64(g.vec.WithLabelValues(methodProxy)); got != 1 {
		t.Fatalf("full_receive_channels{service_method=Proxy} = %v; want 1", got)
	}
	if n := testutil.CollectAndCount(g.vec); n != 2 {
		t.Fatalf("%d series; want one per service method", n)
	}
}
