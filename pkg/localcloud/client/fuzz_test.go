package client_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/controllers/queue"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// FuzzParseRetryAfter checks ParseRetryAfter (delay-seconds or an
// HTTP-date) and the controllers' clamp applied to what it returns:
//   - nothing panics; the result is never negative and at most 24 h;
//   - delay-seconds round-trip: a positive integer n up to a day gives
//     exactly n seconds, and formatting the result as seconds parses back
//     to it;
//   - an HTTP-date gives the time until it (0 if past, capped at 24 h),
//     whatever the form;
//   - the clamped delay is within [MinRetryAfter, MaxRetryAfter] when
//     usable, and unusable exactly when the header gave 0.
func FuzzParseRetryAfter(f *testing.F) {
	f.Add("3", int64(0))
	f.Add(" 120 ", int64(0))
	f.Add("0", int64(0))
	f.Add("-5", int64(0))
	f.Add("99999999999999999999", int64(0))
	f.Add("86401", int64(0))
	f.Add("Wed, 21 Oct 2015 07:28:00 GMT", int64(1445412470))
	f.Add("Wednesday, 21-Oct-15 07:28:00 GMT", int64(1445412470))
	f.Add("Wed Oct 21 07:28:00 2015", int64(1445412470))
	f.Add("1.5", int64(0))
	f.Add("+7", int64(0))
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		now := time.Unix(nowUnix%(1<<40), 0).UTC()
		d := client.ParseRetryAfter(v, now)
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("ParseRetryAfter(%q) = %v, out of [0, 24h]", v, d)
		}
		if d%time.Second != 0 && func() bool { _, err := http.ParseTime(strings.TrimSpace(v)); return err != nil }() {
			t.Fatalf("ParseRetryAfter(%q) = %v, not whole seconds", v, d)
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			want := time.Duration(0)
			if n > 0 {
				want = time.Duration(min(n, 86400)) * time.Second
			}
			if d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %v", v, d, want)
			}
			if d > 0 {
				if back := client.ParseRetryAfter(strconv.FormatInt(int64(d/time.Second), 10), now); back != d {
					t.Fatalf("%v does not round-trip: %v", d, back)
				}
			}
		} else if ts, err := http.ParseTime(strings.TrimSpace(v)); err == nil {
			want := time.Duration(0)
			if ts.After(now) {
				want = ts.Sub(now)
			}
			want = min(want, 24*time.Hour)
			if d != want {
				t.Fatalf("ParseRetryAfter(%q) at %v = %v, want %v", v, now, d, want)
			}
		} else if d != 0 {
			t.Fatalf("malformed %q gave %v", v, d)
		}
		c, ok := queue.ClampRetryAfter(d, true)
		if ok != (d > 0) {
			t.Fatalf("ClampRetryAfter(%v) usable=%v", d, ok)
		}
		if ok && (c < queue.MinRetryAfter || c > queue.MaxRetryAfter) {
			t.Fatalf("ClampRetryAfter(%v) = %v, out of bounds", d, c)
		}
		if !ok && c != 0 {
			t.Fatalf("ClampRetryAfter(%v) = %v with ok=false", d, c)
		}
	})
}
