package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/console"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// The console's security properties over plain HTTP. TestConsoleInBrowser
// checks them too, but it skips without Chromium; these run everywhere, so
// a console that lets a viewer write cannot pass `make test` on a machine
// without a browser. Each refusal is paired with the same request from a
// read-write session succeeding (the negative control: a console that
// refused everything would fail here too).

// browser is one user agent: its own cookie jar, redirects not followed
// (so each step's status and cookies can be checked).
type browser struct {
	t        *testing.T
	endpoint string
	c        *http.Client
}

func newBrowser(t *testing.T, endpoint string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, endpoint: endpoint, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path, contentType, body string, header map[string]string) (*http.Response, string) {
	b.t.Helper()
	u := path
	if !strings.HasPrefix(u, "http") {
		u = b.endpoint + path
	}
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	return resp, readAll(resp)
}

// loginWithToken posts the login form, as the page's form does.
func (b *browser) loginWithToken(tok string) *http.Response {
	b.t.Helper()
	resp, body := b.do("POST", "/console/login", "application/x-www-form-urlencoded", "token="+url.QueryEscape(tok), nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		b.t.Fatalf("token login: %d Location %q, want 303 to /console/: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	return resp
}

// writable is what the console tells this session's page it may do, from
// both places the page learns it: the state call and the event stream.
func (b *browser) writable() bool {
	b.t.Helper()
	resp, body := b.do("GET", "/console/api/state", "", "", nil)
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("GET /console/api/state: %d: %s", resp.StatusCode, body)
	}
	var st struct {
		Session struct {
			Writable *bool `json:"writable"`
		} `json:"session"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Session.Writable == nil {
		b.t.Fatalf("state without a session.writable (%v): %.300s", err, body)
	}
	if ev := b.sessionEvent(); ev != *st.Session.Writable {
		b.t.Fatalf("the event stream says writable=%v, the state call %v", ev, *st.Session.Writable)
	}
	return *st.Session.Writable
}

// sessionEvent reads the first event of /console/api/events ("session").
func (b *browser) sessionEvent() bool {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.endpoint+"/console/api/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("GET /console/api/events: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("GET /console/api/events: %d: %s", resp.StatusCode, readAll(resp))
	}
	sc := bufio.NewScanner(resp.Body)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
			continue
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			if event != "session" {
				b.t.Fatalf("first event %q, want session", event)
			}
			var s struct {
				Writable *bool `json:"writable"`
			}
			if err := json.Unmarshal([]byte(d), &s); err != nil || s.Writable == nil {
				b.t.Fatalf("session event %q: %v", d, err)
			}
			return *s.Writable
		}
	}
	b.t.Fatalf("event stream ended without a session event: %v", sc.Err())
	return false
}

// putFaults is the page's write: JSON with the console's write header.
func (b *browser) putFaults(f api.Faults, header map[string]string) (int, string) {
	b.t.Helper()
	js, _ := json.Marshal(f)
	resp, body := b.do("PUT", "/console/api/faults", "application/json", string(js), header)
	return resp.StatusCode, body
}

var pageWrite = map[string]string{console.WriteHeader: "1"}

func cloudFaults(t *testing.T, cloud *localcloudtest.Cloud) []api.FaultRule {
	t.Helper()
	f, err := cloud.Client.Faults(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return f.Rules
}

func checkSessionCookie(t *testing.T, resp *http.Response) {
	t.Helper()
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Name != console.CookieName || ck[0].Value == "" || !ck[0].HttpOnly ||
		ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/console/" {
		t.Errorf("session cookie %+v: want one HttpOnly SameSite=Strict %s cookie for /console/", ck, console.CookieName)
	}
}

// TestConsoleReadOnlyOverHTTP: a viewer (by token or by a read-only link)
// is told it may not write and is refused every write, and the cloud's
// faults stay what they were; a read-write session's same write is the
// cloud's.
func TestConsoleReadOnlyOverHTTP(t *testing.T) {
	cloud := localcloudtest.Start(t)
	ctx := context.Background()

	// The read-write session, by a one-time link: it works once.
	admin := newBrowser(t, cloud.Endpoint)
	link, _, err := cloud.Client.ConsoleTicket(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := admin.do("GET", link, "", "", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("one-time link: %d Location %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	checkSessionCookie(t, resp)
	// The ticket is in this URL: it must not leak to other sites as a Referer.
	if rp := resp.Header.Get("Referrer-Policy"); rp != "no-referrer" {
		t.Errorf("Referrer-Policy on the ticket login %q, want no-referrer", rp)
	}
	if again, body := newBrowser(t, cloud.Endpoint).do("GET", link, "", "", nil); again.StatusCode != http.StatusUnauthorized || len(again.Cookies()) != 0 {
		t.Errorf("second use of a one-time link: %d, cookies %v, want 401 and none: %s", again.StatusCode, again.Cookies(), body)
	}
	if !admin.writable() {
		t.Fatal("a read-write link's session is told it is read-only")
	}
	// The page itself, for a logged-in session: framing refused, scripts
	// only its own.
	page, body := admin.do("GET", "/console/", "", "", nil)
	if page.StatusCode != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("GET /console/ logged in: %d: %.200s", page.StatusCode, body)
	}
	for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
		if got := page.Header.Get(h); got != want {
			t.Errorf("console page %s: %q, want %q", h, got, want)
		}
	}
	if csp := page.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("console page Content-Security-Policy %q", csp)
	}

	// The state every viewer attempt below must leave alone.
	want := []api.FaultRule{{Method: "PUT", PathPrefix: "/v1/load-balancers", ThrottleRate: 0.3, RetryAfterSeconds: 2}}
	if status, body := admin.putFaults(api.Faults{Rules: want}, pageWrite); status != http.StatusNoContent {
		t.Fatalf("PUT faults from a read-write session: %d, want 204: %s", status, body)
	}
	if got := cloudFaults(t, cloud); !reflect.DeepEqual(got, want) {
		t.Fatalf("cloud's faults after a read-write session set them: %+v, want %+v", got, want)
	}

	viewerByLink := newBrowser(t, cloud.Endpoint)
	roLink, ticket, err := cloud.Client.ConsoleTicket(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !ticket.ReadOnly {
		t.Fatalf("read-only ticket %+v", ticket)
	}
	if resp, body := viewerByLink.do("GET", roLink, "", "", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("read-only link: %d: %s", resp.StatusCode, body)
	} else {
		checkSessionCookie(t, resp)
	}
	viewerByToken := newBrowser(t, cloud.Endpoint)
	checkSessionCookie(t, viewerByToken.loginWithToken(cloud.ViewerToken))

	for name, v := range map[string]*browser{"viewer token": viewerByToken, "read-only link": viewerByLink} {
		if v.writable() {
			t.Errorf("%s: the session is told it may write", name)
		}
		// Clearing the rules, and adding one that fails every call: both
		// writes a viewer must not make.
		for _, f := range []api.Faults{{Rules: []api.FaultRule{}}, {Rules: []api.FaultRule{{Method: "*", ErrorRate: 1}}}} {
			status, body := v.putFaults(f, pageWrite)
			if status != http.StatusForbidden || !strings.Contains(body, "read-only") {
				t.Errorf("%s: PUT faults %+v: %d %q, want 403 read-only", name, f.Rules, status, strings.TrimSpace(body))
			}
			if got := cloudFaults(t, cloud); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s changed the cloud's faults: %+v, want %+v", name, got, want)
			}
		}
	}

	// The viewer token is for the console only: as a bearer token on the
	// cloud's API it opens nothing, reads included.
	for _, method := range []string{"GET", "PUT"} {
		resp, body := newBrowser(t, cloud.Endpoint).do(method, "/v1/faults", "application/json", `{"rules":[]}`,
			map[string]string{"Authorization": "Bearer " + cloud.ViewerToken})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s /v1/faults with the viewer token as bearer: %d, want 401: %s", method, resp.StatusCode, body)
		}
	}
	if got := cloudFaults(t, cloud); !reflect.DeepEqual(got, want) {
		t.Fatalf("the viewer token on the API changed the cloud's faults: %+v, want %+v", got, want)
	}

	// The read-write session can still clear them (the refusals above were
	// about the session, not a broken write path).
	if status, body := admin.putFaults(api.Faults{Rules: []api.FaultRule{}}, pageWrite); status != http.StatusNoContent {
		t.Fatalf("clear faults from a read-write session: %d: %s", status, body)
	}
	if got := cloudFaults(t, cloud); len(got) != 0 {
		t.Fatalf("faults after a read-write session cleared them: %+v", got)
	}
}

// TestConsoleWritesNeedHeader: a read-write session's write without the
// console's header (all a cross-site form or a simple cross-origin request
// can send) is refused and changes nothing; the same write with it works.
func TestConsoleWritesNeedHeader(t *testing.T) {
	cloud := localcloudtest.Start(t)
	admin := newBrowser(t, cloud.Endpoint)
	admin.loginWithToken(cloud.Token)
	rule := api.Faults{Rules: []api.FaultRule{{Method: "*", ErrorRate: 1}}}
	js, _ := json.Marshal(rule)
	for _, ct := range []string{"application/json", "text/plain", "application/x-www-form-urlencoded"} {
		resp, body := admin.do("PUT", "/console/api/faults", ct, string(js), nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, console.WriteHeader) {
			t.Errorf("PUT faults (%s) without %s: %d %q, want 403 naming the header", ct, console.WriteHeader, resp.StatusCode, strings.TrimSpace(body))
		}
		if got := cloudFaults(t, cloud); len(got) != 0 {
			t.Fatalf("a write without %s changed the cloud's faults: %+v", console.WriteHeader, got)
		}
	}
	// The page's writes are PUTs: a cross-site form can only POST.
	if resp, _ := admin.do("POST", "/console/api/faults", "application/x-www-form-urlencoded", "rules=x", nil); resp.StatusCode == http.StatusNoContent {
		t.Errorf("POST faults (a form's method) accepted")
	}
	if status, body := admin.putFaults(rule, pageWrite); status != http.StatusNoContent {
		t.Fatalf("PUT faults with %s: %d: %s", console.WriteHeader, status, body)
	}
	if got := cloudFaults(t, cloud); !reflect.DeepEqual(got, rule.Rules) {
		t.Fatalf("cloud's faults after the page's write: %+v, want %+v", got, rule.Rules)
	}
}

// TestConsoleLogoutAndForgedSessions: logging out deletes the cookie (the
// same browser is then sent to the login form), and a session cookie that
// was altered or never issued opens nothing.
func TestConsoleLogoutAndForgedSessions(t *testing.T) {
	cloud := localcloudtest.Start(t)
	viewer := newBrowser(t, cloud.Endpoint)
	login := viewer.loginWithToken(cloud.ViewerToken)
	issued := login.Cookies()[0]
	if resp, _ := viewer.do("GET", "/console/api/state", "", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("state before logout: %d", resp.StatusCode)
	}

	// A viewer's cookie upgraded to read-write by hand ("1." → "2."), and
	// a made-up one: refused as no session at all.
	rest, ok := strings.CutPrefix(issued.Value, "1.")
	upgraded := "2." + rest
	if !ok {
		t.Fatalf("viewer cookie %q does not start with its access level", issued.Value)
	}
	for name, v := range map[string]string{"upgraded": upgraded, "made up": "2.99999999999.AAAA"} {
		req, _ := http.NewRequest("PUT", cloud.Endpoint+"/console/api/faults", strings.NewReader(`{"rules":[{"method":"*","errorRate":1}]}`))
		req.Header.Set(console.WriteHeader, "1")
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: v})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s cookie: PUT faults %d, want 401", name, resp.StatusCode)
		}
	}
	if got := cloudFaults(t, cloud); len(got) != 0 {
		t.Fatalf("a forged cookie changed the cloud's faults: %+v", got)
	}

	resp, body := viewer.do("POST", "/console/logout", "", "", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("logout: %d Location %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if ck := resp.Cookies(); len(ck) != 1 || ck[0].Name != console.CookieName || ck[0].MaxAge >= 0 || ck[0].Path != "/console/" {
		t.Errorf("logout cookies %+v: want %s deleted for /console/", ck, console.CookieName)
	}
	if resp, _ := viewer.do("GET", "/console/api/state", "", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("state after logout: %d, want 401", resp.StatusCode)
	}
	if resp, _ := viewer.do("GET", "/console/", "", "", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Errorf("page after logout: %d Location %q, want 303 to the login form", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The session is over on the server too: a copy of the cookie kept
	// from before the logout opens nothing.
	req, _ := http.NewRequest("GET", cloud.Endpoint+"/console/api/state", nil)
	req.AddCookie(issued)
	copied, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = copied.Body.Close()
	if copied.StatusCode != http.StatusUnauthorized {
		t.Errorf("a copy of the logged-out cookie: state %d, want 401", copied.StatusCode)
	}
}
