package queue

import (
	"testing"
	"time"
)

// A pass begun while the previous one runs joins it; a sync that started
// before the pass does not count for it.
func TestPassJoinsAndIgnoresEarlierSyncs(t *testing.T) {
	var observed int
	p := &Pass{Observe: func(float64) { observed++ }}
	early := time.Now()
	p.Begin()
	p.Add("a")
	p.End()
	p.done("a", early)
	if observed != 0 {
		t.Fatal("a sync from before the pass ended it")
	}
	p.Begin()
	p.Add("b")
	p.End()
	p.done("a", time.Now())
	if observed != 0 {
		t.Fatal("the joined pass ended with b pending")
	}
	p.done("b", time.Now())
	if observed != 1 {
		t.Fatalf("observed %d passes, want 1", observed)
	}
}

// A pass with no key (a node sync with no load balancer, a monitor period
// with no candidate) is observed at once, as upstream's loops over nothing.
func TestPassOfNothing(t *testing.T) {
	var got []float64
	p := &Pass{Observe: func(v float64) { got = append(got, v) }}
	p.Begin()
	p.End()
	if len(got) != 1 || got[0] > 1 {
		t.Fatalf("a pass of nothing: observed %v, want one observation at once", got)
	}
}
