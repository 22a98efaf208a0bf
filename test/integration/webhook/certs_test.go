package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/testenv"
)

type pemPair struct{ cert, key []byte }

// selfSigned is a serving pair for 127.0.0.1 that no CA vouches for.
func selfSigned(t *testing.T) pemPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "untrusted"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// issue is a serving pair for 127.0.0.1 from the control plane's CA, which
// the apiserver trusts through the webhook's CA bundle.
func issue(t *testing.T) pemPair {
	t.Helper()
	c, err := testenv.ControlPlane(t).IssueServingCert(fmt.Sprintf("webhook-%d", time.Now().UnixNano()), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return pemPair{cert: c.CertPEM, key: c.KeyPEM}
}

func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}
