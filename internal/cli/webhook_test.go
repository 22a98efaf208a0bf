package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is written by the command and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestWebhookServeHelp(t *testing.T) {
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"webhook", "serve", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--cloud-provider", "--cloud-config", "--webhooks", "--webhook-bind-address", "--webhook-secure-port",
		"--webhook-cert-dir", "--webhook-tls-cert-file", "--webhook-tls-private-key-file", "--webhook-tls-cipher-suites",
		"--webhook-tls-curve-preferences", "--webhook-tls-min-version", "--webhook-disable-http2-serving",
		"--pv-label-on-provider-error", "persistent-volume-label", `(default [*])`} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help lacks %s:\n%s", flag, out.String())
		}
	}
}

func TestWebhookServeErrors(t *testing.T) {
	cloudConfig := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudConfig, []byte("endpoint: https://127.0.0.1:1\ntoken: test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cloud-provider is required"},
		{[]string{"--cloud-provider=local", "--webhooks=nope"}, `unknown webhook "nope"`},
		{[]string{"--cloud-provider=local", "--pv-label-on-provider-error=maybe"}, "--pv-label-on-provider-error"},
		{[]string{"--cloud-provider=local", "--webhook-tls-min-version=VersionTLS10"}, "--webhook-tls-min-version=VersionTLS10"},
		{[]string{"--cloud-provider=local", "--webhooks=-persistent-volume-label", "--cloud-config=" + cloudConfig}, "--webhooks=-persistent-volume-label enables no webhook"},
	} {
		root := NewRootCommand()
		root.SetOut(io.Discard)
		root.SetArgs(append([]string{"webhook", "serve"}, tc.args...))
		err := root.ExecuteContext(t.Context())
		if err == nil || (tc.want != "" && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// `portside webhook serve` serves persistent-volume-label on a free port,
// prints the address, and stops with its context.
func TestWebhookServe(t *testing.T) {
	cloudConfig := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudConfig, []byte("endpoint: https://127.0.0.1:1\ntoken: test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := NewRootCommand()
	out := &syncBuffer{}
	root.SetOut(out)
	root.SetArgs([]string{"webhook", "serve", "--cloud-provider=local", "--cloud-config=" + cloudConfig,
		"--webhook-secure-port=0", "--webhook-bind-address=127.0.0.1"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var url string
	for deadline := time.Now().Add(20 * time.Second); url == ""; time.Sleep(50 * time.Millisecond) {
		if _, after, ok := strings.Cut(out.String(), "Serving webhooks on "); ok {
			url = strings.TrimSpace(after)
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no address printed: %q", out.String())
		}
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url+"/persistent-volume-label", "application/json", strings.NewReader(
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE",`+
			`"resource":{"group":"","version":"v1","resource":"configmaps"},"object":{"apiVersion":"v1","kind":"ConfigMap"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"uid":"u1"`) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
