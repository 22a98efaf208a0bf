package webhook

import (
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
)

// testCA is a CA that signs client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) client(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestClientCA: with ClientCAFile, only clients with a certificate of that
// CA get an answer; the others fail in the TLS handshake.
func TestClientCA(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	url, _ := startServer(t, ServeOptions{ClientCAFile: caFile})
	for _, tc := range []struct {
		name   string
		certs  []tls.Certificate
		served bool
	}{
		{"no client certificate", nil, false},
		{"a certificate of another CA", []tls.Certificate{other.client(t)}, false},
		{"a certificate of the client CA", []tls.Certificate{ca.client(t)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: tc.certs}, // the server's certificate is not under test
			}}
			defer c.CloseIdleConnections()
			resp, err := c.Post(url+"/allow", "application/json", strings.NewReader(review("admission.k8s.io/v1", "u1")))
			if err == nil {
				_ = resp.Body.Close()
			}
			if tc.served != (err == nil && resp.StatusCode == http.StatusOK) {
				t.Fatalf("served %v, want %v (err %v)", err == nil, tc.served, err)
			}
		})
	}
}

func TestClientCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.crt")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		filepath.Join(dir, "missing.crt"): "--webhook-client-ca-file",
		junk:                              "no PEM CA certificate in it",
	} {
		_, _, err := Serve(t.Context(), ServeOptions{BindAddress: "127.0.0.1", ClientCAFile: file, Webhooks: testWebhooks})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one with %q", file, err, want)
		}
	}
}
