package console_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portside-io/portside/internal/browsertest"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

var screenshot = flag.String("screenshot", "", "write a screenshot of the console to this file")

// waitFor polls a JavaScript condition in the page.
func waitFor(t *testing.T, ctx context.Context, what, js string, timeout time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		var text string
		text, _ = chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText.slice(0, 3000) : ''"))
		t.Fatalf("%s: not within %v (%v); page:\n%s", what, timeout, err, text)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// TestConsoleInBrowser drives the console in headless Chromium: a one-time
// link logs in, the page shows a load balancer's backend healthy, then
// unhealthy within seconds once its instance is stopped in the cloud; a
// fault set from the page is the cloud's; a read-only session cannot.
func TestConsoleInBrowser(t *testing.T) {
	cloud := localcloudtest.Start(t)
	ctx := context.Background()
	inst, err := cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-1", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	addr := inst.Addresses[0].Address
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	if _, err := cloud.Client.PutLoadBalancer(ctx, "lb-web", api.LoadBalancerSpec{Cluster: "test",
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 8080, BackendPort: port}},
		Backends:  []api.Backend{{Name: "node-1", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	link, ticket, err := cloud.Client.ConsoleTicket(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if ticket.ReadOnly || !strings.Contains(link, "/console/login?ticket=") {
		t.Fatalf("ticket %+v, link %s", ticket, link)
	}

	b := browsertest.New(t)
	if _, err := chromedp.Run(b, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	healthy := `document.querySelector('[data-lb="lb-web"] [data-backend="node-1"][data-healthy="true"]') !== null`
	waitFor(t, b, "backend node-1 of lb-web healthy on the page", healthy, 20*time.Second)
	if got := eval[string](t, b, `document.getElementById("mode").textContent`); got != "read-write" {
		t.Errorf("mode badge %q, want read-write", got)
	}
	waitFor(t, b, "instance node-1 running in zone-a", `(document.querySelector('[data-instance="node-1"]')||{}).textContent?.includes("running") === true`, 10*time.Second)
	if *screenshot != "" {
		if err := browsertest.Screenshot(b, *screenshot); err != nil {
			t.Error(err)
		}
	}

	// The instance stops: its backend stops answering, within seconds.
	began := time.Now()
	if _, err := cloud.Client.StopInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "backend node-1 unhealthy after its instance stopped",
		`document.querySelector('[data-lb="lb-web"] [data-backend="node-1"][data-healthy="false"]') !== null`, 10*time.Second)
	t.Logf("stopped instance shown unhealthy after %v", time.Since(began).Round(time.Millisecond))
	waitFor(t, b, "instance node-1 shown stopped", `document.querySelector('[data-instance="node-1"]').textContent.includes("stopped")`, 10*time.Second)
	if _, err := cloud.Client.StartInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "backend node-1 healthy again after its instance started", healthy, 10*time.Second)

	// A fault set from the page is in force in the cloud.
	if _, err := chromedp.Run(b, chromedp.Steps(
		chromedp.SetValue("#f-method", "PUT", chromedp.NodeVisible),
		chromedp.SetValue("#f-path", "/v1/load-balancers"),
		chromedp.SetValue("#f-throttle", "0.3"),
		chromedp.SetValue("#f-retry", "2"),
		chromedp.Click("#f-add"),
	)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "the rule listed on the page", `document.querySelectorAll('[data-fault]').length === 1`, 10*time.Second)
	f, err := cloud.Client.Faults(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := api.FaultRule{Method: "PUT", PathPrefix: "/v1/load-balancers", ThrottleRate: 0.3, RetryAfterSeconds: 2}
	if len(f.Rules) != 1 || f.Rules[0] != want {
		t.Fatalf("cloud's faults after the page set one: %+v, want [%+v]", f.Rules, want)
	}
	// The page lists the calls the cloud served, with their callers.
	waitFor(t, b, "the fault read shown in recent API calls", `document.getElementById("calls-t").textContent.includes("GET /v1/faults")`, 10*time.Second)
	if _, err := chromedp.Run(b, chromedp.Click("#f-clear")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "faults cleared on the page", `document.querySelectorAll('[data-fault]').length === 0`, 10*time.Second)
	if f, _ := cloud.Client.Faults(ctx); f == nil || len(f.Rules) != 0 {
		t.Fatalf("faults after clearing from the page: %+v", f)
	}

	// The link worked once.
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("second use of a one-time link: %d, want 401", resp.StatusCode)
	}

	// A read-only session (another browser profile) sees the page but
	// cannot set faults, neither from the form nor by calling the API.
	ro, cancel := browsertest.NewUser(b)
	defer cancel()
	roLink, _, err := cloud.Client.ConsoleTicket(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ro, chromedp.Navigate(roLink)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ro, "read-only page loaded", `document.getElementById("mode").textContent === "read-only"`, 20*time.Second)
	if !eval[bool](t, ro, `document.getElementById("f-add").disabled`) {
		t.Error("the add-rule button is enabled in a read-only session")
	}
	status := eval[float64](t, ro, `fetch("/console/api/faults", {method: "PUT", headers: {"X-Portside-Console": "1", "Content-Type": "application/json"}, body: '{"rules":[{"method":"*","errorRate":1}]}'}).then(r => r.status)`)
	if status != http.StatusForbidden {
		t.Errorf("PUT faults from a read-only session: %v, want 403", status)
	}
	if f, _ := cloud.Client.Faults(ctx); f == nil || len(f.Rules) != 0 {
		t.Fatalf("a read-only session changed the faults: %+v", f)
	}
}

// TestConsoleLoginForm: the form takes the API token (read-write) or the
// viewer token (read-only), refuses others with a message, and pages and
// API calls without a session go to the form / get 401.
func TestConsoleLoginForm(t *testing.T) {
	cloud := localcloudtest.Start(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		wantStatus               int
		wantLocation, wantText   string
	}{
		{name: "page without session", method: "GET", path: "/console/", wantStatus: 303, wantLocation: "/console/login"},
		{name: "root", method: "GET", path: "/", wantStatus: 303, wantLocation: "/console/"},
		{name: "api without session", method: "GET", path: "/console/api/state", wantStatus: 401, wantText: "not logged in"},
		{name: "events without session", method: "GET", path: "/console/api/events", wantStatus: 401},
		{name: "faults without session", method: "PUT", path: "/console/api/faults", body: `{"rules":[]}`, wantStatus: 401},
		{name: "login form", method: "GET", path: "/console/login", wantStatus: 200, wantText: `name="token"`},
		{name: "unknown ticket", method: "GET", path: "/console/login?ticket=nope", wantStatus: 401, wantText: "already used or has expired"},
		{name: "wrong token", method: "POST", path: "/console/login", body: "token=wrong", wantStatus: 401, wantText: "not valid"},
		{name: "api token", method: "POST", path: "/console/login", body: "token=" + url.QueryEscape(cloud.Token), wantStatus: 303, wantLocation: "/console/"},
		{name: "viewer token", method: "POST", path: "/console/login", body: "token=" + url.QueryEscape(cloud.ViewerToken), wantStatus: 303, wantLocation: "/console/"},
		{name: "asset", method: "GET", path: "/console/assets/app.js", wantStatus: 200, wantText: "EventSource"},
		{name: "unknown page", method: "GET", path: "/console/nope", wantStatus: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, cloud.Endpoint+tc.path, strings.NewReader(tc.body))
			if tc.method == "POST" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var body strings.Builder
			_, _ = fmt.Fprint(&body, readAll(resp))
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.wantStatus, body.String())
			}
			if tc.wantLocation != "" && resp.Header.Get("Location") != tc.wantLocation {
				t.Errorf("Location %q, want %q", resp.Header.Get("Location"), tc.wantLocation)
			}
			if !strings.Contains(body.String(), tc.wantText) {
				t.Errorf("body lacks %q: %s", tc.wantText, body.String())
			}
			if csp := resp.Header.Get("Content-Security-Policy"); strings.HasPrefix(tc.path, "/console") && !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if strings.HasSuffix(tc.name, "token") && resp.StatusCode == 303 {
				if ck := resp.Cookies(); len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
					t.Errorf("session cookie %+v: want one HttpOnly SameSite=Strict cookie", ck)
				}
			}
		})
	}
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
