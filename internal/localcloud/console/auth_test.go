package console

import (
	"strings"
	"testing"
	"time"
)

func TestTokenAccess(t *testing.T) {
	a := newAuthenticator("write-tok", "view-tok", []byte("k"))
	for _, tc := range []struct {
		tok  string
		want access
	}{
		{"write-tok", readWrite},
		{" write-tok\n", readWrite},
		{"view-tok", readOnly},
		{"", noAccess},
		{"write-to", noAccess},
		{"write-tokk", noAccess},
		{"VIEW-TOK", noAccess},
	} {
		if got := a.tokenAccess(tc.tok); got != tc.want {
			t.Errorf("tokenAccess(%q) = %v, want %v", tc.tok, got, tc.want)
		}
	}
	if got := newAuthenticator("w", "", nil).tokenAccess(""); got != noAccess {
		t.Errorf("no viewer token: empty token gives %v", got)
	}
}

func TestTickets(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	a := newAuthenticator("w", "v", []byte("k"))
	a.now = func() time.Time { return now }
	rw, _ := a.newTicket(true)
	ro, _ := a.newTicket(false)
	old, _ := a.newTicket(true)
	if got := a.redeem(rw); got != readWrite {
		t.Errorf("write ticket: %v", got)
	}
	if got := a.redeem(rw); got != noAccess {
		t.Errorf("write ticket used twice: %v", got)
	}
	if got := a.redeem(ro); got != readOnly {
		t.Errorf("read-only ticket: %v", got)
	}
	now = now.Add(TicketTTL + time.Second)
	if got := a.redeem(old); got != noAccess {
		t.Errorf("expired ticket: %v", got)
	}
	for range maxTickets * 3 {
		a.newTicket(true)
	}
	if len(a.tickets) > maxTickets {
		t.Errorf("%d tickets kept, at most %d", len(a.tickets), maxTickets)
	}
}

func TestSessions(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	a := newAuthenticator("w", "v", []byte("k"))
	a.now = func() time.Time { return now }
	rw, _ := a.session(readWrite)
	ro, _ := a.session(readOnly)
	other := newAuthenticator("w", "v", []byte("other key"))
	other.now = a.now
	forged, _ := other.session(readWrite)
	upgraded := "2" + strings.TrimPrefix(ro, "1")
	for _, tc := range []struct {
		name, cookie string
		at           time.Time
		want         access
	}{
		{"read-write", rw, now, readWrite},
		{"read-only", ro, now, readOnly},
		{"other key", forged, now, noAccess},
		{"access changed", upgraded, now, noAccess},
		{"expired", rw, now.Add(SessionTTL + time.Second), noAccess},
		{"garbage", "x", now, noAccess},
		{"empty", "", now, noAccess},
		{"no mac", "2.99999999999", now, noAccess},
	} {
		a.now = func() time.Time { return tc.at }
		if got := a.verify(tc.cookie); got != tc.want {
			t.Errorf("%s: verify = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The same key (the cloud's stored secret) verifies after a restart.
	again := newAuthenticator("w", "v", []byte("k"))
	again.now = func() time.Time { return now }
	if got := again.verify(rw); got != readWrite {
		t.Errorf("after restart: %v", got)
	}
}
