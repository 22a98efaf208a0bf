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
		if got := a.verify(tc.cookie).acc; got != tc.want {
			t.Errorf("%s: verify = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The same key (the cloud's stored secret) verifies after a restart.
	again := newAuthenticator("w", "v", []byte("k"))
	again.now = func() time.Time { return now }
	if got := again.verify(rw).acc; got != readWrite {
		t.Errorf("after restart: %v", got)
	}
	// A restart with a rotated API token (same stored key): the read-write
	// session granted under the old token is over, the viewer's is not.
	rotated := newAuthenticator("w2", "v", []byte("k"))
	rotated.now = func() time.Time { return now }
	if got := rotated.verify(rw).acc; got != noAccess {
		t.Errorf("read-write session after the token rotated across a restart: %v", got)
	}
	if got := rotated.verify(ro).acc; got != readOnly {
		t.Errorf("read-only session after the API token (not the viewer's) rotated: %v", got)
	}
}

// TestSessionEnds: rotation (live) and logout end sessions; a rotation
// and a revocation wake watchers; tickets of a rotated token are void.
func TestSessionEnds(t *testing.T) {
	a := newAuthenticator("w", "v", []byte("k"))
	rw, _ := a.session(readWrite)
	ro, _ := a.session(readOnly)
	ro2, _ := a.session(readOnly)
	tRW, _ := a.newTicket(true)
	tRO, _ := a.newTicket(false)

	w := a.watch()
	a.setTokens("w2", "v")
	select {
	case <-w:
	default:
		t.Fatal("rotation did not wake watchers")
	}
	if got := a.verify(rw).acc; got != noAccess {
		t.Errorf("read-write session after rotating the write token: %v", got)
	}
	if got := a.redeem(tRW); got != noAccess {
		t.Errorf("write ticket after rotating the write token: %v", got)
	}
	if got := a.redeem(tRO); got != readOnly {
		t.Errorf("read-only ticket after rotating only the write token: %v", got)
	}
	if got := a.tokenAccess("w"); got != noAccess {
		t.Errorf("old write token logs in: %v", got)
	}
	if got := a.tokenAccess("w2"); got != readWrite {
		t.Errorf("new write token: %v", got)
	}

	g := a.verify(ro)
	if g.acc != readOnly || g.sid == "" {
		t.Fatalf("viewer session: %+v", g)
	}
	w = a.watch()
	a.revoke(g.sid, g.exp)
	select {
	case <-w:
	default:
		t.Fatal("logout did not wake watchers")
	}
	if got := a.verify(ro).acc; got != noAccess {
		t.Errorf("logged-out session: %v", got)
	}
	if got := a.verify(ro2).acc; got != readOnly {
		t.Errorf("another session of the same token after one logged out: %v", got)
	}
	a.setTokens("w2", "v2")
	if got := a.verify(ro2).acc; got != noAccess {
		t.Errorf("read-only session after rotating the viewer token: %v", got)
	}

	// The logged-out set is bounded, forgetting expired ones first.
	for i := 0; i < maxRevoked+10; i++ {
		a.revoke(strings.Repeat("x", 4)+string(rune('a'+i%26))+time.Duration(i).String(), time.Now().Add(time.Hour))
	}
	if len(a.revoked) > maxRevoked {
		t.Errorf("%d revoked sessions kept, at most %d", len(a.revoked), maxRevoked)
	}
}
