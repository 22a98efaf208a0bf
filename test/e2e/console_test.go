package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portside-io/portside/internal/browsertest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

var consoleScreenshot = flag.String("console-screenshot", "", "write screenshots of the console under `portside up` to this directory (docs/images for the README)")

// TestConsole opens the web console `portside up` links to in headless
// Chromium: it shows the demo Service, its load balancer and healthy
// backends, and the nodes; a node's instance stopped in the cloud turns
// unhealthy on the page within seconds; a fault set from the page is what
// `portside cloud faults get` shows.
func TestConsole(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	// Read-write: the test sets faults from the page (the default link is read-only).
	up, out, done := testenv.StartUp(t, bin, root, "--purge", "--data-dir", data, "--console-read-write")
	defer testenv.StopUp(t, bin, data, up, done)
	m := regexp.MustCompile(`web console: (http://127\.0\.0\.1:\d+/console/login\?ticket=[0-9a-f]+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("portside up printed no console link:\n%s", out.String())
	}
	cloudDir := filepath.Join(data, "cloud")

	b := browsertest.New(t)
	if _, err := chromedp.Run(b, chromedp.Navigate(m[1])); err != nil {
		t.Fatal(err)
	}
	const web = `document.querySelector('[data-service="demo/hello"]')`
	waitFor(t, b, "demo/hello served with every backend healthy", web+`?.textContent.includes("serving:") && `+
		web+`.querySelectorAll('[data-backend][data-healthy="true"]').length > 0 && `+
		web+`.querySelectorAll('[data-backend][data-healthy="false"]').length === 0`, 60*time.Second)
	waitFor(t, b, "3 nodes, initialized, with zones and pod CIDRs", `[...document.querySelectorAll('[data-node]')].filter(r => r.textContent.includes("initialized") && !r.textContent.includes("not initialized") && r.textContent.includes("zone-") && r.textContent.includes("/24")).length === 3`, 30*time.Second)
	waitFor(t, b, "the Service's pods listed with their nodes", web+`.textContent.includes(" on node-")`, 10*time.Second)
	if *consoleScreenshot != "" {
		if err := browsertest.Screenshot(b, filepath.Join(*consoleScreenshot, "console.png")); err != nil {
			t.Error(err)
		}
	}

	// Stop the instance of a node that serves the Service.
	node := eval[string](t, b, web+`.querySelector('[data-backend][data-healthy="true"]').getAttribute("data-backend")`)
	var insts []api.Instance
	js, err := exec.Command(bin, "cloud", "instances", "list", "--data-dir", cloudDir, "-o", "json").Output()
	if err != nil || json.Unmarshal(js, &insts) != nil {
		t.Fatalf("cloud instances list: %v\n%s", err, js)
	}
	id := ""
	for _, i := range insts {
		if i.Name == node {
			id = i.ID
		}
	}
	if id == "" {
		t.Fatalf("no instance named %s in %s", node, js)
	}
	began := time.Now()
	if o, err := exec.Command(bin, "cloud", "instances", "stop", id, "--data-dir", cloudDir).CombinedOutput(); err != nil {
		t.Fatalf("stop %s: %v\n%s", id, err, o)
	}
	waitFor(t, b, node+" unhealthy on the page after its instance stopped",
		web+`.querySelector('[data-backend="`+node+`"][data-healthy="false"]') !== null`, 10*time.Second)
	t.Logf("%s's instance stopped: shown unhealthy after %v", node, time.Since(began).Round(10*time.Millisecond))
	if o, err := exec.Command(bin, "cloud", "instances", "start", id, "--data-dir", cloudDir).CombinedOutput(); err != nil {
		t.Fatalf("start %s: %v\n%s", id, err, o)
	}
	waitFor(t, b, node+" healthy again after its instance started",
		web+`.querySelector('[data-backend="`+node+`"][data-healthy="true"]') !== null`, 20*time.Second)

	// A fault set from the page.
	if _, err := chromedp.Run(b, chromedp.Steps(
		chromedp.SetValue("#f-method", "GET", chromedp.NodeVisible),
		chromedp.SetValue("#f-path", "/v1/volumes"),
		chromedp.SetValue("#f-error", "0.25"),
		chromedp.Click("#f-add"),
	)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "the rule listed on the page", `document.querySelectorAll('[data-fault]').length === 1`, 10*time.Second)
	got, err := exec.Command(bin, "cloud", "faults", "get", "--data-dir", cloudDir).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud faults get: %v\n%s", err, got)
	}
	if !regexp.MustCompile(`(?m)^GET\s+/v1/volumes\s+0\.25\s+0\s`).Match(got) {
		t.Fatalf("`portside cloud faults get` after setting a rule on the page:\n%s", got)
	}
	t.Logf("portside cloud faults get:\n%s", got)
	if _, err := chromedp.Run(b, chromedp.Click("#f-clear")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "faults cleared", `document.querySelectorAll('[data-fault]').length === 0`, 10*time.Second)
	if got, _ := exec.Command(bin, "cloud", "faults", "get", "--data-dir", cloudDir).CombinedOutput(); strings.Contains(string(got), "/v1/volumes") {
		t.Fatalf("faults after clearing on the page:\n%s", got)
	}
}

func waitFor(t *testing.T, ctx context.Context, what, js string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(max(time.Until(deadline), time.Millisecond)), chromedp.WithPollingInterval(100*time.Millisecond)))
		if err == nil {
			return
		}
		// A navigation (the login's redirect, a reload) destroys the
		// execution context the poll ran in: poll again in the new one.
		if strings.Contains(err.Error(), "Cannot find context with specified id") && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText.slice(0, 4000) : ''"))
		t.Fatalf("%s: not within %v (%v); page:\n%s", what, timeout, err, text)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}
