package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// servedCert dials url's host and returns the certificate it presents and
// the negotiated protocol.
func servedCert(t *testing.T, url string) (*x509.Certificate, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{
		InsecureSkipVerify: true, // the test compares the certificate itself
		NextProtos:         []string{"h2", "http/1.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	st := conn.ConnectionState()
	return st.PeerCertificates[0], st.NegotiatedProtocol
}

// writePair writes a new self-signed pair and returns its serial.
func writePair(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	certPEM, keyPEM, err := selfSigned("")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return serialOf(t, certPEM)
}

func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Text(16)
}

func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	a := writePair(t, certFile, keyFile)
	reg := prometheus.NewRegistry()
	url, _ := startServer(t, ServeOptions{CertFile: certFile, KeyFile: keyFile, Registry: reg})
	if c, _ := servedCert(t, url); c.SerialNumber.Text(16) != a {
		t.Fatalf("serving %s, want pair A %s", c.SerialNumber.Text(16), a)
	}
	b := writePair(t, certFile, keyFile)
	deadline := time.Now().Add(3 * time.Second)
	for {
		c, _ := servedCert(t, url)
		if c.SerialNumber.Text(16) == b {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving %s 3s after pair B %s was written", c.SerialNumber.Text(16), b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if c, _ := servedCert(t, url); c.SerialNumber.Text(16) != b {
			t.Fatalf("after garbage: serving %s, want B %s", c.SerialNumber.Text(16), b)
		}
	}
	if n := metricValue(t, reg, "portside_webhook_certificate_reloads_total", map[string]string{"result": "loaded"}); n != 1 {
		t.Errorf("reloads loaded = %v, want 1", n)
	}
	if n := metricValue(t, reg, "portside_webhook_certificate_reloads_total", map[string]string{"result": "invalid"}); n != 1 {
		t.Errorf("reloads invalid = %v, want 1 (logged once per change)", n)
	}
	// Fixed again: served.
	c2 := writePair(t, certFile, keyFile)
	time.Sleep(1100 * time.Millisecond)
	servedCert(t, url) // triggers the check
	if c, _ := servedCert(t, url); c.SerialNumber.Text(16) != c2 {
		t.Errorf("serving %s after a valid pair %s replaced the garbage", c.SerialNumber.Text(16), c2)
	}
}

func TestCertDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	url, _ := startServer(t, ServeOptions{CertDir: dir})
	certPEM, err := os.ReadFile(filepath.Join(dir, "cloud-controller-manager-webhook.crt"))
	if err != nil {
		t.Fatalf("generated pair: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "cloud-controller-manager-webhook.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("generated key: %v %v", st, err)
	}
	gen := serialOf(t, certPEM)
	c, proto := servedCert(t, url)
	if c.SerialNumber.Text(16) != gen || proto != "h2" {
		t.Fatalf("serving %s over %q, want the generated %s over h2", c.SerialNumber.Text(16), proto, gen)
	}
	if err := c.VerifyHostname("localhost"); err != nil {
		t.Errorf("generated certificate: %v", err)
	}
	// An existing pair is served, not replaced.
	url2, _ := startServer(t, ServeOptions{CertDir: dir, DisableHTTP2: true})
	if c, proto := servedCert(t, url2); c.SerialNumber.Text(16) != gen || proto != "http/1.1" {
		t.Errorf("second start serves %s over %q, want %s over http/1.1", c.SerialNumber.Text(16), proto, gen)
	}
	// Explicit files win over the directory.
	other := t.TempDir()
	f := writePair(t, filepath.Join(other, "a.crt"), filepath.Join(other, "a.key"))
	url3, _ := startServer(t, ServeOptions{CertDir: dir, CertFile: filepath.Join(other, "a.crt"), KeyFile: filepath.Join(other, "a.key")})
	if c, _ := servedCert(t, url3); c.SerialNumber.Text(16) != f {
		t.Errorf("with files and a dir: serving %s, want the files' %s", c.SerialNumber.Text(16), f)
	}
}

func TestCertErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, PairName+".crt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    ServeOptions
		want string
	}{
		{ServeOptions{CertDir: dir}, "need both"},
		{ServeOptions{CertFile: filepath.Join(dir, "x.crt")}, "go together"},
		{ServeOptions{CertFile: filepath.Join(dir, "x.crt"), KeyFile: filepath.Join(dir, "x.key")}, "webhook serving certificate"},
	} {
		tc.o.BindAddress = "127.0.0.1"
		_, _, err := Serve(t.Context(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.o, err, tc.want)
		}
	}
}

func TestCertInMemory(t *testing.T) {
	url, _ := startServer(t, ServeOptions{})
	c, _ := servedCert(t, url)
	if err := c.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
}
