package manager

import (
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func httpTimeout(t *testing.T, c kubernetes.Interface) time.Duration {
	t.Helper()
	rc, ok := c.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc.Client == nil {
		t.Fatalf("unexpected REST client %T", c.CoreV1().RESTClient())
	}
	return rc.Client.Timeout
}

func limiter(t *testing.T, c kubernetes.Interface) any {
	t.Helper()
	return c.CoreV1().RESTClient().(*rest.RESTClient).GetRateLimiter()
}

// TestWatchClientHasNoRequestTimeout: a whole-request timeout on the
// informers' client would cut every watch after 30 s and force relists.
func TestWatchClientHasNoRequestTimeout(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", Timeout: 30 * time.Second}
	cs, err := newClients(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := httpTimeout(t, cs.watch); got != 0 {
		t.Errorf("watch client timeout = %v, want none", got)
	}
	if got := httpTimeout(t, cs.write); got != 30*time.Second {
		t.Errorf("write client timeout = %v, want 30s", got)
	}
	if cs.perController != nil {
		t.Error("per-controller clients without --use-service-account-credentials")
	}
	c, err := cs.forController(Controller{Name: "x", ClientName: "service-controller"})
	if err != nil || c == cs.write {
		t.Fatalf("forController without service account credentials = %v, %v; want a client of its own", c, err)
	}
	if got := httpTimeout(t, c); got != 30*time.Second {
		t.Errorf("controller client timeout = %v, want 30s", got)
	}
	other, _ := cs.forController(Controller{Name: "y", ClientName: "route-controller"})
	if limiter(t, c) == limiter(t, cs.write) || limiter(t, c) == limiter(t, other) || limiter(t, c) == nil {
		t.Error("controllers share a rate limiter: one controller's burst would queue another's writes")
	}
	if cfg.Timeout != 30*time.Second {
		t.Error("the caller's config was changed")
	}
	sa, err := newClients(cfg, true)
	if err != nil || sa.perController == nil {
		t.Fatalf("--use-service-account-credentials: no client builder (%v)", err)
	}
}
