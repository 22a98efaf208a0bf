package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/testenv"
)

// TestUpWebhookRequiresTheAPIServersCertificate: in `portside up` the
// CCM's persistent-volume-label webhook answers kube-apiserver (a PV
// created through it gets its topology, with failurePolicy Fail, so the
// apiserver's client certificate was accepted) and refuses, in the TLS
// handshake, a caller without a client certificate and one with a client
// certificate of the cluster's CA (the admin's): only the webhook client
// CA's certificate, which only the apiserver holds, is accepted.
func TestUpWebhookRequiresTheAPIServersCertificate(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	up, out, done := testenv.StartUp(t, bin, root, "--nodes", "1", "--network-proxy=false", "--purge", "--data-dir", data)
	defer func() {
		if b, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput(); err != nil {
			t.Errorf("portside down: %v\n%s", err, b)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = up.Process.Kill()
			t.Errorf("portside up did not exit after portside down")
		}
		testenv.AssertNoProcessesUsing(t, data)
	}()
	if !strings.Contains(out.String(), "from the ccm's persistent-volume-label webhook") {
		t.Fatalf("the demo shows no PV labelled by the webhook:\n%s", out.String())
	}
	ctx := context.Background()
	client := upClient(t, data)

	// The demo's PV, again (dry run): labelled through the webhook.
	demo, err := client.CoreV1().PersistentVolumes().Get(ctx, "demo-data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "clientcert-check"}, Spec: demo.Spec}
	pv.Spec.NodeAffinity, pv.Spec.ClaimRef = nil, nil
	got, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || got.Labels[corev1.LabelTopologyZone] == "" || got.Labels[corev1.LabelTopologyRegion] == "" {
		t.Fatalf("PV through the apiserver: %v, labels %v", err, got.Labels)
	}

	mwc, err := deploy.PVLabelWebhookConfiguration("", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := *reg.Webhooks[0].ClientConfig.URL
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(reg.Webhooks[0].ClientConfig.CABundle)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(data, "controlplane", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"no client certificate", nil},
		{"the cluster CA's admin certificate", &admin},
	} {
		tc := &tls.Config{RootCAs: roots}
		if c.cert != nil {
			// Sent even though the server asks for another CA's (Go's
			// client would otherwise send none).
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert, nil }
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := hc.Post(url, "application/json", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`))
		hc.CloseIdleConnections()
		if err == nil {
			_ = resp.Body.Close()
			t.Errorf("%s: the webhook answered %s", c.name, resp.Status)
			continue
		}
		// TLS 1.3 reports the server's refusal on the first read, as an alert.
		if !strings.Contains(err.Error(), "certificate required") && !strings.Contains(err.Error(), "bad certificate") &&
			!strings.Contains(err.Error(), "unknown certificate authority") {
			t.Errorf("%s: refused, but not for its certificate: %v", c.name, err)
		}
		t.Logf("%s: refused: %v", c.name, err)
	}
}
