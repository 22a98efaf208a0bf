package link

import (
	"bytes"
	"context"
	"crypto/rand"
	"math/big"
	"sync"
	"testing"
	"time"
)

// tryWriter is a destination that takes, on TryWrite, a share of what it
// is given chosen by take (all, none, some), and everything on Write
// (WriteTo's path), recording both.
type tryWriter struct {
	mu     sync.Mutex
	got    bytes.Buffer
	take   func(n int) int
	tries  int // TryWrite calls that took something
	writes int // Write calls
	// lateWrites are Write calls after a TryWrite took something: with a
	// destination that takes all, none (WriteTo's first payloads may come
	// before it is registered as the destination, but not after).
	lateWrites int
	wroteAll   chan struct{}
	want       int
}

func (w *tryWriter) TryWrite(p []byte) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.take(len(p))
	if n > 0 {
		w.tries++
	}
	w.got.Write(p[:n])
	w.check()
	return n
}

func (w *tryWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if w.tries > 0 {
		w.lateWrites++
	}
	w.got.Write(p)
	w.check()
	return len(p), nil
}

func (w *tryWriter) check() {
	if w.got.Len() == w.want {
		close(w.wroteAll)
	}
}

// TestWriteThrough: with a destination that can take writes without
// waiting, the reader writes payloads itself, and whatever the
// destination takes each time (all, nothing, part), the bytes arrive
// whole and in order, past several windows (credit keeps flowing whether
// the reader or WriteTo consumed them).
func TestWriteThrough(t *testing.T) {
	random := func(n int) int {
		r, _ := rand.Int(rand.Reader, big.NewInt(int64(n)+1))
		return int(r.Int64())
	}
	for _, tc := range []struct {
		name string
		take func(n int) int
		// direct: the reader must have written some of it itself;
		// queued: WriteTo must have written some after that.
		direct, queued bool
	}{
		{"takes all", func(n int) int { return n }, true, false},
		{"takes nothing", func(int) int { return 0 }, false, true},
		{"takes part", random, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, a := pair(t, Config{})
			data := make([]byte, 4<<20+777)
			_, _ = rand.Read(data)
			w := &tryWriter{take: tc.take, wroteAll: make(chan struct{}), want: len(data)}
			done := make(chan error, 1)
			acceptEach(a, func(st *Stream) {
				go func() { _, err := st.WriteTo(w); done <- err }()
			})
			st, err := d.Dial(context.Background(), "tcp", "10.0.0.1:80")
			if err != nil {
				t.Fatal(err)
			}
			// Small writes first (an exec's keystrokes), then bulk in odd
			// sizes, more than the window in all.
			off := 0
			for ; off < 100*64; off += 64 {
				if _, err := st.Write(data[off : off+64]); err != nil {
					t.Fatal(err)
				}
			}
			for off < len(data) {
				n := min(70_001, len(data)-off)
				if _, err := st.Write(data[off : off+n]); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			select {
			case <-w.wroteAll:
			case <-time.After(30 * time.Second):
				w.mu.Lock()
				n := w.got.Len()
				w.mu.Unlock()
				t.Fatalf("%d of %d bytes arrived", n, len(data))
			}
			w.mu.Lock()
			same, tries, writes, late := bytes.Equal(w.got.Bytes(), data), w.tries, w.writes, w.lateWrites
			w.mu.Unlock()
			if !same {
				t.Fatal("the bytes arrived changed or out of order")
			}
			queued := writes > 0
			if tc.direct {
				queued = late > 0
			}
			if (tries > 0) != tc.direct || queued != tc.queued {
				t.Errorf("%d payloads written by the reader, %d by WriteTo (%d after the reader's first): want the reader %v, WriteTo %v",
					tries, writes, late, tc.direct, tc.queued)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Errorf("WriteTo after the peer's Close: %v, want nil", err)
			}
		})
	}
}
