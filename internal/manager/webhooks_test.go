package manager

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/portside-io/portside/internal/webhook"
)

type allowAll struct{}

func (allowAll) Admit(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

// stubWebhooks stand in for the built-in ones.
var stubWebhooks = []webhook.Webhook{
	{Name: "stub", Path: "/stub", New: func(context.Context, *webhook.Context) (webhook.Admitter, string, error) { return allowAll{}, "", nil }},
	{Name: "off", Path: "/off", DisabledByDefault: true, New: func(context.Context, *webhook.Context) (webhook.Admitter, string, error) { return allowAll{}, "", nil }},
}

// The webhook flags are upstream's: name, type and default, not hidden
// (implemented), and never reported ignored; --webhook-tls-sni-cert-key
// alone stays an accepted-and-ignored flag.
func TestWebhookFlagsAsUpstream(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("ccm", pflag.ContinueOnError)
	o.AddFlags(fs)
	n := 0
	for _, u := range UpstreamFlags {
		if !strings.HasPrefix(u.Name, "webhook") {
			continue
		}
		n++
		f := fs.Lookup(u.Name)
		if f == nil {
			t.Errorf("--%s is not registered", u.Name)
			continue
		}
		if f.Value.Type() != u.Type || f.DefValue != u.Default {
			t.Errorf("--%s is %s, default %q; upstream's is %s, default %q", u.Name, f.Value.Type(), f.DefValue, u.Type, u.Default)
		}
		if f.Hidden != (u.Name == "webhook-tls-sni-cert-key") {
			t.Errorf("--%s hidden=%v", u.Name, f.Hidden)
		}
	}
	if n != 11 {
		t.Errorf("%d upstream webhook flags, want 11", n)
	}
	if f := fs.Lookup("pv-label-on-provider-error"); f == nil || f.DefValue != "deny" || f.Hidden {
		t.Errorf("--pv-label-on-provider-error: %+v", f)
	}
	if err := fs.Parse([]string{"--webhooks=*,-persistent-volume-label", "--webhook-secure-port=0", "--webhook-bind-address=::1",
		"--webhook-tls-curve-preferences=29,23", "--webhook_cert_dir=/tmp/x", "--pv-label-on-provider-error=admit"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Webhooks, ",") != "*,-persistent-volume-label" || o.WebhookSecurePort != 0 || o.WebhookBindAddress.String() != "::1" ||
		len(o.WebhookTLSCurvePreferences) != 2 || o.WebhookCertDir != "/tmp/x" || o.PVLabelOnProviderError != "admit" {
		t.Errorf("parsed: %+v", o.WebhookOptions)
	}
	if ig := o.IgnoredFlags(); len(ig) != 0 {
		t.Errorf("reported ignored: %v", ig)
	}
	if DefaultWebhooks()[0].Name != "persistent-volume-label" || DefaultWebhooks()[0].Path != "/persistent-volume-label" {
		t.Errorf("DefaultWebhooks: %+v", DefaultWebhooks())
	}
}

func TestWebhookValidate(t *testing.T) {
	for _, tc := range []struct {
		set  func(o *Options)
		want string
	}{
		{func(o *Options) { o.Webhooks = []string{"*", "-nope"} }, `--webhooks: unknown webhook "nope"; known webhooks: persistent-volume-label`},
		{func(o *Options) { o.Webhooks = []string{"pv-label"} }, `unknown webhook "pv-label"`},
		{func(o *Options) { o.PVLabelOnProviderError = "allow" }, `--pv-label-on-provider-error="allow": use deny or admit`},
		{func(o *Options) { o.PVLabelOnProviderError = "" }, `--pv-label-on-provider-error="": use deny or admit`},
		{func(o *Options) { o.WebhookSecurePort = 70000 }, "--webhook-secure-port 70000 is out of range"},
		{func(o *Options) { o.WebhookCertFile = "a.crt" }, "--webhook-tls-cert-file and --webhook-tls-private-key-file go together"},
		{func(o *Options) { o.WebhookTLSMinVersion = "VersionTLS11" }, "--webhook-tls-min-version=VersionTLS11: Portside serves TLS 1.2 or later"},
		{func(o *Options) { o.WebhookTLSCipherSuites = []string{"NOPE"} }, "--webhook-tls-cipher-suites:"},
		{func(o *Options) { o.WebhookTLSCurvePreferences = []int32{23, 7} }, "--webhook-tls-curve-preferences: 7 is not a curve"},
	} {
		o := NewOptions()
		o.CloudProvider = "local"
		tc.set(o)
		err := o.Validate(known)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want %q", err, tc.want)
		}
	}
	o := NewOptions()
	o.CloudProvider = "local"
	o.Webhooks = []string{"*"}
	o.PVLabelOnProviderError = "admit"
	o.WebhookTLSCurvePreferences = []int32{29, 23}
	if err := o.Validate(known); err != nil {
		t.Errorf("valid: %v", err)
	}
}

func postReview(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url, "application/json", strings.NewReader(
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func TestServeWebhooks(t *testing.T) {
	ctx := t.Context()
	// Nothing enabled, or --webhook-secure-port=0: nothing served.
	for _, set := range []func(o *WebhookOptions){
		func(o *WebhookOptions) {},
		func(o *WebhookOptions) { o.Webhooks = []string{"*"}; o.WebhookSecurePort = 0 },
		func(o *WebhookOptions) { o.Webhooks = []string{"*", "-stub"} },
	} {
		o := NewWebhookOptions()
		o.KnownWebhooks = stubWebhooks
		set(&o)
		if addr, errc, err := o.ServeWebhooks(ctx, nil, nil); addr != "" || errc != nil || err != nil {
			t.Errorf("%v: served at %q (%v)", o.Webhooks, addr, err)
		}
	}
	// A listener of the caller's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := NewWebhookOptions()
	o.KnownWebhooks, o.Webhooks, o.WebhookListener, o.WebhookSecurePort = stubWebhooks, []string{"*"}, ln, 0
	addr, _, err := o.ServeWebhooks(ctx, nil, nil)
	if err != nil || addr != ln.Addr().String() {
		t.Fatalf("served at %q, want %s: %v", addr, ln.Addr(), err)
	}
	if got := postReview(t, "https://"+addr+"/stub"); !strings.Contains(got, `"uid":"u1","allowed":true`) {
		t.Errorf("/stub: %s", got)
	}
	// Standalone: port 0 picks a free port; a cert dir gets the pair.
	s := NewStandaloneWebhookOptions()
	s.KnownWebhooks, s.WebhookSecurePort, s.WebhookBindAddress = stubWebhooks, 0, net.IPv4(127, 0, 0, 1)
	s.WebhookCertDir = t.TempDir()
	addr, _, err = s.ServeWebhooks(ctx, nil, nil)
	if err != nil || strings.HasSuffix(addr, ":0") || addr == "" {
		t.Fatalf("standalone served at %q: %v", addr, err)
	}
	if _, err := os.Stat(filepath.Join(s.WebhookCertDir, "cloud-controller-manager-webhook.crt")); err != nil {
		t.Error(err)
	}
	if got := postReview(t, "https://"+addr+"/off"); !strings.Contains(got, "404") {
		t.Errorf("/off (disabled by default) answered: %s", got)
	}
}

// Every replica serves the webhooks, leader or not: Run serves them before
// leader election starts, here with an apiserver that never answers.
func TestRunServesWebhooksBeforeLeaderElection(t *testing.T) {
	dir := t.TempDir()
	cloudConfig, kubeconfig := filepath.Join(dir, "cloud.yaml"), filepath.Join(dir, "kubeconfig")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(cloudConfig, []byte("endpoint: https://127.0.0.1:1\ntoken: test\n"), 0o600))
	must(os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: test}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	o := NewOptions()
	o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", cloudConfig, kubeconfig
	o.BindAddress, o.SecurePort = "127.0.0.1", 0
	o.KnownWebhooks, o.Webhooks, o.WebhookListener = stubWebhooks, []string{"stub"}, ln
	whAddr := make(chan string, 1)
	o.OnWebhookServing = func(a string) { whAddr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o, nil, nil) }()
	select {
	case a := <-whAddr:
		if got := postReview(t, "https://"+a+"/stub"); !strings.Contains(got, `"allowed":true`) {
			t.Errorf("/stub: %s", got)
		}
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("webhooks not served")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop")
	}
}
