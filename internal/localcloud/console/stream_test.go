package console

import (
	"bufio"
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// stubCloud is a cloud of nothing: these tests are about sessions.
type stubCloud struct{}

func (stubCloud) State(context.Context) (CloudState, error)   { return CloudState{}, nil }
func (stubCloud) SetFaults(context.Context, api.Faults) error { return nil }

// openStream logs in with tok and opens the event stream; it returns the
// client (with the session cookie) and a channel of the stream's event
// names, closed when the stream ends.
func openStream(t *testing.T, srv *httptest.Server, tok string) (*http.Client, <-chan string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.PostForm(srv.URL+"/console/login", url.Values{"token": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/console/api/events", nil)
	resp, err = cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	events := make(chan string, 16)
	go func() {
		defer close(events)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events <- ev
			}
		}
	}()
	if ev := <-events; ev != "session" {
		t.Fatalf("first event %q, want session", ev)
	}
	return cl, events
}

// waitEnded waits for the stream to send "ended" and close.
func waitEnded(t *testing.T, what string, events <-chan string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	ended := false
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				if !ended {
					t.Fatalf("%s: the stream closed without an ended event", what)
				}
				return
			}
			ended = ended || ev == "ended"
		case <-deadline:
			t.Fatalf("%s: the event stream is still open", what)
		}
	}
}

func startConsole(t *testing.T) (*Console, *httptest.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Cloud: stubCloud{}, WriteToken: "w", ViewerToken: "v", Interval: 50 * time.Millisecond})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { srv.Close(); cancel() })
	return c, srv
}

// TestStreamsEndWithTheirSession: an open event stream ends when the token
// its session was granted under is rotated and when the session logs out;
// streams of other sessions stay open.
func TestStreamsEndWithTheirSession(t *testing.T) {
	c, srv := startConsole(t)
	_, writer := openStream(t, srv, "w")
	viewerClient, viewer := openStream(t, srv, "v")
	_, viewer2 := openStream(t, srv, "v")

	c.SetTokens("w-rotated", "v")
	waitEnded(t, "write session after rotating the write token", writer)
	select {
	case ev, ok := <-viewer:
		if !ok || ev == "ended" {
			t.Fatalf("a viewer stream ended when only the write token rotated (%q %v)", ev, ok)
		}
	case <-time.After(300 * time.Millisecond):
	}

	resp, err := viewerClient.Post(srv.URL+"/console/logout", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	waitEnded(t, "viewer session after logout", viewer)
	select {
	case ev, ok := <-viewer2:
		if !ok || ev == "ended" {
			t.Fatalf("another viewer's stream ended on one's logout (%q %v)", ev, ok)
		}
	case <-time.After(300 * time.Millisecond):
	}
	c.SetTokens("w-rotated", "v-rotated")
	waitEnded(t, "viewer session after rotating the viewer token", viewer2)
}

// TestStreamEndsAtExpiry: a stream ends when its session expires.
func TestStreamEndsAtExpiry(t *testing.T) {
	c, srv := startConsole(t)
	// Sessions are granted as if SessionTTL-5s ago, so they last ~5 s; the
	// clock is set before any request, only its offset changes later.
	var offset atomic.Int64
	offset.Store(int64(-SessionTTL + 5*time.Second))
	c.auth.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	_, events := openStream(t, srv, "v")
	offset.Store(0)
	waitEnded(t, "a session at its expiry", events)
}
