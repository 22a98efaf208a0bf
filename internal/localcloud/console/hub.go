package console

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// hub builds snapshots while at least one page is open, one producer for
// all of them, and sends each page the latest one that differs from the
// previous (a slow page skips intermediate ones rather than queueing them).
type hub struct {
	ctx      context.Context
	interval time.Duration
	build    func() Snapshot

	mu      sync.Mutex
	subs    map[chan []byte]struct{}
	last    []byte
	running bool
	pokeCh  chan struct{}
}

func newHub(ctx context.Context, interval time.Duration, build func() Snapshot) *hub {
	return &hub{ctx: ctx, interval: interval, build: build, subs: map[chan []byte]struct{}{}, pokeCh: make(chan struct{}, 1)}
}

// subscribe returns a channel of snapshots (the current one first).
func (h *hub) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	if h.last != nil {
		ch <- h.last
	}
	if !h.running {
		h.running = true
		go h.run()
	} else {
		h.poke()
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// poke makes the producer build a snapshot now (e.g. after a write).
func (h *hub) poke() {
	select {
	case h.pokeCh <- struct{}{}:
	default:
	}
}

func (h *hub) run() {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		data, err := json.Marshal(h.build())
		h.mu.Lock()
		if len(h.subs) == 0 || h.ctx.Err() != nil {
			h.running, h.last = false, nil
			h.mu.Unlock()
			return
		}
		if err == nil && !sameExceptTime(h.last, data) {
			h.last = data
			for ch := range h.subs {
				select { // replace an unread snapshot with the newer one
				case <-ch:
				default:
				}
				ch <- data
			}
		}
		h.mu.Unlock()
		select {
		case <-h.ctx.Done():
		case <-t.C:
		case <-h.pokeCh:
		}
	}
}

// sameExceptTime compares two snapshots ignoring "generated", the last
// field, so an unchanged cloud sends nothing.
func sameExceptTime(a, b []byte) bool {
	cut := func(s []byte) []byte {
		if i := bytes.LastIndex(s, []byte(`,"generated":`)); i >= 0 {
			return s[:i]
		}
		return s
	}
	return a != nil && bytes.Equal(cut(a), cut(b))
}
