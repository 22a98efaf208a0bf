package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// TestFlagsRequireClientCertificates: with --server-ca-cert and
// --cluster-ca-cert, the TLS configs Options builds from the flags (the
// ones the command serves with) refuse a client without a certificate on
// the TCP frontend and on the agent port, and accept one the CA signed.
// The server's other tests build their TLS configs themselves, so only
// this one guards the flag path.
func TestFlagsRequireClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := testCert(t, nil, nil, "flags-test-ca", 0)
	writePEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.Raw)
	srv, srvKey := testCert(t, ca, caKey, "proxy-server", x509.ExtKeyUsageServerAuth)
	writePEM(t, filepath.Join(dir, "s.crt"), "CERTIFICATE", srv.Raw)
	writeKey(t, filepath.Join(dir, "s.key"), srvKey)
	cli, cliKey := testCert(t, ca, caKey, "client", x509.ExtKeyUsageClientAuth)

	f := NewFlags()
	fs := pflag.NewFlagSet("proxy-server", pflag.ContinueOnError)
	f.AddFlags(fs)
	crt, key, caf := filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key"), filepath.Join(dir, "ca.crt")
	if err := fs.Parse([]string{"--server-cert=" + crt, "--server-key=" + key, "--server-ca-cert=" + caf,
		"--cluster-cert=" + crt, "--cluster-key=" + key, "--cluster-ca-cert=" + caf}); err != nil {
		t.Fatal(err)
	}
	o, err := f.Options(fs, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	withCert := tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey}
	for _, side := range []struct {
		name string
		cfg  *tls.Config
	}{{"the TCP frontend (--server-ca-cert)", o.FrontendTLS}, {"the agent port (--cluster-ca-cert)", o.AgentTLS}} {
		if side.cfg == nil {
			t.Fatalf("%s: no TLS config", side.name)
		}
		for _, c := range []struct {
			name  string
			certs []tls.Certificate
			ok    bool
		}{{"no client certificate", nil, false}, {"a certificate of the CA", []tls.Certificate{withCert}, true}} {
			err := serverHandshake(t, side.cfg, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: c.certs})
			if (err == nil) != c.ok {
				t.Errorf("%s, %s: server handshake error %v, want ok=%v", side.name, c.name, err, c.ok)
			}
		}
	}
}

// serverHandshake is the server side's handshake result for one client.
func serverHandshake(t *testing.T, server, client *tls.Config) error {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	result := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			result <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		result <- c.(*tls.Conn).Handshake()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		// TLS 1.3: the client is done before the server has read its
		// certificate; a read sees the server's verdict.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}
	return <-result
}

func testCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}
