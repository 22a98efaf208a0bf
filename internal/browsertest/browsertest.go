// Package browsertest runs a real headless Chromium for tests, driven with
// chromedp. Debian's chromium package is installed by hack/ensure-chromium.sh
// (run by `make test`); without it the tests skip, saying so.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/portside-io/portside/internal/testskip"
)

// Find returns the Chromium binary: $PORTSIDE_CHROMIUM, else chromium,
// chromium-browser or google-chrome on PATH.
func Find() (string, bool) {
	if p := os.Getenv("PORTSIDE_CHROMIUM"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// New starts a headless browser for the test (stopped at its end) and
// returns a context for chromedp actions on its first tab.
func New(t testing.TB) context.Context {
	t.Helper()
	bin, ok := Find()
	if !ok {
		testskip.Unavailable(t, "no Chromium: run hack/ensure-chromium.sh (apt-get install chromium; `make test` runs it) or set PORTSIDE_CHROMIUM to a Chrome/Chromium binary")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium leaves an org.chromium.Chromium.* directory in its
		// temporary directory at every start: give it the test's own, which
		// the test removes, so no run leaves anything in /tmp.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.WindowSize(1440, 1000),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Test machines run as root, where Chromium's sandbox cannot start.
		chromedp.NoSandbox,
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so a broken installation fails here, clearly.
	// (The first action's context owns the browser: not a derived one.)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return ctx
}

// NewUser opens a tab in a new browser context of the same browser: its
// own cookies, as a second user.
func NewUser(ctx context.Context) (context.Context, context.CancelFunc) {
	return chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
}

// Screenshot writes a PNG of the whole page to path (creating its
// directory).
func Screenshot(ctx context.Context, path string) error {
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf, 0o644)
}
