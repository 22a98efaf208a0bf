package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type admitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

func (f admitFunc) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return f(ctx, req)
}

func stub(name string, f admitFunc) Webhook {
	return Webhook{Name: name, Path: "/" + name, New: func(context.Context, *Context) (Admitter, string, error) { return f, "", nil }}
}

// testWebhooks: "allow" allows (the UID it sets is overwritten), "deny"
// denies, "panic" panics, "nil" breaks the contract, "skipped" is skipped.
var testWebhooks = []Webhook{
	stub("allow", func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{UID: "wrong", Allowed: true, Warnings: []string{"op " + string(req.Operation)}}
	}),
	stub("deny", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Code: 403, Message: "no"}}
	}),
	stub("panic", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { panic("boom") }),
	stub("nil", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return nil }),
	{Name: "skipped", Path: "/skipped", New: func(context.Context, *Context) (Admitter, string, error) { return nil, "no cloud", nil }},
}

// startServer serves o (with testWebhooks when o.Webhooks is nil) on
// 127.0.0.1:0 until the test ends; it returns the base URL and a client.
func startServer(t *testing.T, o ServeOptions) (string, *http.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if o.Webhooks == nil {
		o.Webhooks = testWebhooks
	}
	o.BindAddress = "127.0.0.1"
	addr, errc, err := Serve(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("server: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the test checks the certificate itself
	}}
	t.Cleanup(client.CloseIdleConnections)
	return "https://" + addr, client
}

func review(apiVersion, uid string) string {
	return `{"apiVersion":"` + apiVersion + `","kind":"AdmissionReview","request":{"uid":"` + uid +
		`","operation":"CREATE","resource":{"group":"","version":"v1","resource":"persistentvolumes"},"object":{"kind":"PersistentVolume"}}}`
}

func TestServeRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	url, client := startServer(t, ServeOptions{Registry: reg})
	big := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"x":"` +
		strings.Repeat("a", MaxReviewBytes) + `"}}}`
	for _, tc := range []struct {
		name, method, path, ctype, body string
		code                            int
		want                            string // in the body
	}{
		{"allowed v1", "POST", "/allow", "application/json", review(APIVersionV1, "u1"), 200,
			`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"u1","allowed":true,"warnings":["op CREATE"]}}`},
		{"allowed v1beta1", "POST", "/allow", "application/json; charset=utf-8", review(APIVersionV1beta1, "u2"), 200,
			`"apiVersion":"admission.k8s.io/v1beta1","response":{"uid":"u2","allowed":true`},
		{"denied", "POST", "/deny", "application/json", review(APIVersionV1, "u3"), 200, `"response":{"uid":"u3","allowed":false,"status":{"metadata":{},"message":"no","code":403}}`},
		{"GET", "GET", "/allow", "", "", 405, "method GET not allowed: POST an AdmissionReview"},
		{"no content type", "POST", "/allow", "", review(APIVersionV1, "u"), 415, "no Content-Type: want application/json"},
		{"yaml", "POST", "/allow", "application/yaml", review(APIVersionV1, "u"), 415, `Content-Type "application/yaml": want application/json`},
		{"bad content type", "POST", "/allow", "application/json; =", review(APIVersionV1, "u"), 400, `Content-Type "application/json; =":`},
		{"too large", "POST", "/allow", "application/json", big, 400, "AdmissionReview larger than 7 MiB"},
		{"empty", "POST", "/allow", "application/json", "", 400, "empty body"},
		{"malformed", "POST", "/allow", "application/json", `{"apiVersion":`, 400, "malformed AdmissionReview"},
		{"wrong type", "POST", "/allow", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, 400, "malformed AdmissionReview"},
		{"no apiVersion", "POST", "/allow", "application/json", `{"kind":"AdmissionReview","request":{"uid":"u"}}`, 400, "AdmissionReview without apiVersion"},
		{"other apiVersion", "POST", "/allow", "application/json", review("admission.k8s.io/v2", "u"), 400, `apiVersion "admission.k8s.io/v2" is not served`},
		{"other kind", "POST", "/allow", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{"uid":"u"}}`, 400, `kind "Pod": want AdmissionReview`},
		{"no request", "POST", "/allow", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400, "AdmissionReview without request"},
		{"no uid", "POST", "/allow", "application/json", review(APIVersionV1, ""), 400, "AdmissionReview request without uid"},
		{"panic", "POST", "/panic", "application/json", review(APIVersionV1, "u4"), 500, "webhook panic failed on request u4"},
		{"nil response", "POST", "/nil", "application/json", review(APIVersionV1, "u5"), 500, "webhook nil returned no response for request u5"},
		{"skipped", "POST", "/skipped", "application/json", review(APIVersionV1, "u"), 404, ""},
		{"healthz", "GET", "/healthz", "", "", 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, url+tc.path, strings.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || !bytes.Contains(body, []byte(tc.want)) {
				t.Fatalf("%d %q, want %d with %q", resp.StatusCode, body, tc.code, tc.want)
			}
			if tc.code == 200 && tc.path != "/healthz" && resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
		})
	}
	// Upstream's metrics, by code and webhook; Portside's by result.
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cloud_provider_webhook_request_total", map[string]string{"code": "400", "webhook": "allow"}, 10},
		{"cloud_provider_webhook_request_total", map[string]string{"code": "415", "webhook": "allow"}, 2},
		{"cloud_provider_webhook_request_total", map[string]string{"code": "500", "webhook": "panic"}, 1},
		{"portside_webhook_admissions_total", map[string]string{"webhook": "deny", "result": "denied"}, 1},
		{"portside_webhook_admissions_total", map[string]string{"webhook": "allow", "result": "allowed"}, 2},
	} {
		if got := metricValue(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := histogramCount(t, reg, "cloud_provider_webhook_request_duration_seconds", "200", "allow"); n != 2 {
		t.Errorf("request_duration_seconds{code=200,webhook=allow}: %d observations, want 2", n)
	}
}

// metricValue is the value of the counter name{labels} in reg (0 if absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name, code, webhook string) uint64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if mf.GetName() == name && l["code"] == code && l["webhook"] == webhook {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// TestServeRefusesOldTLS: by default (no MinTLSVersion) the webhook
// speaks TLS 1.2 and newer only; a client limited to TLS 1.1 is refused.
func TestServeRefusesOldTLS(t *testing.T) {
	url, _ := startServer(t, ServeOptions{})
	addr := strings.TrimPrefix(url, "https://")
	for _, tc := range []struct {
		name string
		max  uint16
		ok   bool
	}{{"TLS 1.1", tls.VersionTLS11, false}, {"TLS 1.2", tls.VersionTLS12, true}} {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tc.max}) // the version is what is tested
		if c != nil {
			_ = c.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: handshake error %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
