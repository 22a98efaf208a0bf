package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
	"github.com/portside-io/portside/pkg/providers/local"
)

// writePEM writes a PEM block to dir/name and returns the path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// admissionClientCert makes a CA and a client certificate it signs, as an
// operator gives kube-apiserver for calling webhooks: it returns the CA
// file and the client's certificate and key files.
func admissionClientCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook-client-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver-admission"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, "client-ca.crt", "CERTIFICATE", caDER),
		writePEM(t, dir, "admission-client.crt", "CERTIFICATE", der),
		writePEM(t, dir, "admission-client.key", "EC PRIVATE KEY", keyDER)
}

// TestWebhookRequiresTheAPIServersClientCert: kube-apiserver, given a
// client certificate for webhooks by its admission configuration (a
// kubeconfig user "*"), gets its PVs labelled by a webhook that requires
// that certificate's CA; a direct request without a client certificate is
// refused in the TLS handshake, before the webhook or the cloud is asked.
func TestWebhookRequiresTheAPIServersClientCert(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := admissionClientCert(t, dir)
	kubeconfig := filepath.Join(dir, "admission-kubeconfig.yaml")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: "+certFile+"\n    client-key: "+keyFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admission := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admission, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: `+kubeconfig+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := testenv.StartControlPlane(t, controlplane.Options{ExtraAPIServerArgs: []string{"--admission-control-config-file=" + admission}})
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	c := localcloudtest.Start(t)
	provider, err := local.NewFromConfig(local.Config{Endpoint: c.Endpoint, Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := cp.IssueServingCert("webhook-clientca", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc, err := webhook.Serve(ctx, webhook.ServeOptions{
		BindAddress: "127.0.0.1", CertFile: serving.CertFile, KeyFile: serving.KeyFile, ClientCAFile: caFile,
		Webhooks: []webhook.Webhook{pvlabel.Webhook()},
		Context:  &webhook.Context{Cloud: provider, ProviderErrors: webhook.ProviderErrorsDeny},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		for range errc {
		}
	})
	url := "https://" + addr + pvlabel.Path

	mwc, err := deploy.PVLabelWebhookConfiguration(url, cp.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ObjectSelector.MatchLabels = map[string]string{testLabel: mwc.Name}
	vol := createVolume(t, c, "data-clientca", "zone-b")
	// With Fail (the sample's policy), a refused handshake would refuse the
	// PV: the PV coming back labelled proves the apiserver's certificate
	// was presented and accepted.
	install(t, cs, mwc, vol, labeled)
	pv, err := cs.CoreV1().PersistentVolumes().Create(context.Background(), cloudPV(mwc, "clientca", vol), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || pv.Labels[zoneKey] != "zone-b" || pv.Labels[regionKey] != "region-1" {
		t.Fatalf("PV through the apiserver: %v, labels %v", err, pv.Labels)
	}

	// A stranger without a client certificate (trusting the server) is refused at TLS.
	stranger := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cp.CAPool()}}}
	defer stranger.CloseIdleConnections()
	resp, err := stranger.Post(url, "application/json", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a request without a client certificate was answered: %s", resp.Status)
	}
	if !strings.Contains(err.Error(), "certificate required") && !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("refused, but not for its missing certificate: %v", err)
	}
}
