package queue

import (
	"context"
	"sync"
	"time"
)

// Pass times upstream's "loops" (MonitorNodes, node sync) in a queue-driven
// controller:
// a pass begins when the period's candidates are queued and ends when each
// of them has been processed once since (successfully or not, as upstream's
// loop ends whatever each node's check gave). A pass that begins while the
// previous one is still running joins it, so one observation covers both
// (upstream's loop never overlaps itself either). A period with no
// candidate is a pass of about zero seconds, as upstream's loop over
// healthy nodes.
type Pass struct {
	// Observe gets the seconds a pass took.
	Observe func(float64)

	mu      sync.Mutex
	active  bool
	filling bool
	start   time.Time
	pending map[string]struct{}
}

// Begin starts (or joins) a pass; Add each key before queueing it, then End.
func (p *Pass) Begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active {
		p.active, p.start, p.pending = true, time.Now(), map[string]struct{}{}
	}
	p.filling = true
}

func (p *Pass) Add(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active {
		p.pending[key] = struct{}{}
	}
}

// End says every key of the pass is queued.
func (p *Pass) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filling = false
	p.finishIfDone()
}

// done records that key was processed by a sync that started at started.
func (p *Pass) done(key string, started time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active || started.Before(p.start) {
		return // a sync from before the pass: the key is processed again
	}
	delete(p.pending, key)
	p.finishIfDone()
}

func (p *Pass) finishIfDone() {
	if p.active && !p.filling && len(p.pending) == 0 {
		p.Observe(time.Since(p.start).Seconds())
		p.active, p.pending = false, nil
	}
}

// Track wraps a sync function to report its keys done to the pass.
func (p *Pass) Track(sync func(context.Context, string) error) func(context.Context, string) error {
	return func(ctx context.Context, key string) error {
		started := time.Now()
		defer p.done(key, started)
		return sync(ctx, key)
	}
}
