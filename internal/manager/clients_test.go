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
	if err != nil || c != cs.write {
		t.Errorf("forController without service account credentials = %v, %v; want the CCM's client", c, err)
	}
	if cfg.Timeout != 30*time.Second {
		t.Error("the caller's config was changed")
	}
	sa, err := newClients(cfg, true)
	if err != nil || sa.perController == nil {
		t.Fatalf("--use-service-account-credentials: no client builder (%v)", err)
	}
}
