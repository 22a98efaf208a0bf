package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testCA{cert, key, pool}
}

// issue signs a leaf for cn with the usages given, valid until notAfter.
func (ca testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestChainKey(t *testing.T) {
	a, b, c := []byte("ab"), []byte("a"), []byte("bc")
	tests := []struct {
		name string
		x, y [][]byte
		same bool
	}{
		{"same chain", [][]byte{a, c}, [][]byte{a, c}, true},
		{"order matters", [][]byte{a, c}, [][]byte{c, a}, false},
		{"no ambiguity by concatenation", [][]byte{a, []byte("c")}, [][]byte{b, c}, false},
		{"an intermediate more", [][]byte{a}, [][]byte{a, c}, false},
		{"empty certificate", [][]byte{{}}, [][]byte{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chainKey(tt.x) == chainKey(tt.y); got != tt.same {
				t.Errorf("same key %v, want %v", got, tt.same)
			}
		})
	}
}

func TestVerifiedUntil(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *x509.Certificate { return &x509.Certificate{NotAfter: t0.Add(d)} }
	tests := []struct {
		name  string
		chain []*x509.Certificate
		want  time.Time
	}{
		{"leaf expires first", []*x509.Certificate{at(time.Hour), at(48 * time.Hour)}, t0.Add(time.Hour)},
		{"the CA expires first", []*x509.Certificate{at(48 * time.Hour), at(2 * time.Hour), at(3 * time.Hour)}, t0.Add(2 * time.Hour)},
		{"one certificate", []*x509.Certificate{at(time.Minute)}, t0.Add(time.Minute)},
	}
	for _, tt := range tests {
		if got := verifiedUntil(tt.chain); !got.Equal(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestChainCache: a chain that verifies is verified once, then taken from
// the cache until its first certificate expires; one that does not
// verify (another CA, a server-only certificate, expired, garbage, none)
// is refused every time and never kept.
func TestChainCache(t *testing.T) {
	ca, other := newTestCA(t, "ca"), newTestCA(t, "other")
	now := time.Now()
	good := ca.issue(t, "client", x509.ExtKeyUsageClientAuth, now.Add(2*time.Hour))
	clock := now
	verifies := 0
	c := &chainCache{pool: ca.pool, now: func() time.Time { return clock },
		verify: func(leaf *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error) {
			verifies++
			return leaf.Verify(opts)
		}}
	for i := range 3 {
		if err := c.verifyPeer(good.Certificate, nil); err != nil {
			t.Fatalf("good chain, call %d: %v", i, err)
		}
	}
	if verifies != 1 {
		t.Errorf("%d verifications for 3 handshakes of one chain, want 1", verifies)
	}
	clock = now.Add(3 * time.Hour) // past the leaf's NotAfter
	var verr *tls.CertificateVerificationError
	if err := c.verifyPeer(good.Certificate, nil); !errors.As(err, &verr) || verifies != 2 {
		t.Errorf("after the leaf expired: %v (%d verifications), want it verified again and refused", err, verifies)
	}
	clock = now
	for name, raw := range map[string][][]byte{
		"another CA's":      other.issue(t, "x", x509.ExtKeyUsageClientAuth, now.Add(time.Hour)).Certificate,
		"server-only usage": ca.issue(t, "x", x509.ExtKeyUsageServerAuth, now.Add(time.Hour)).Certificate,
		"expired":           ca.issue(t, "x", x509.ExtKeyUsageClientAuth, now.Add(-time.Minute)).Certificate,
		"not a certificate": {[]byte("junk")},
		"no certificate":    nil,
	} {
		for i := range 2 {
			if err := c.verifyPeer(raw, nil); err == nil {
				t.Errorf("%s chain, call %d: accepted", name, i)
			}
		}
	}
	if len(c.entries) != 1 {
		t.Errorf("%d chains kept, want only the good one", len(c.entries))
	}
}

// TestChainCacheBounded: past maxCachedChains, expired verdicts go first,
// and the cache never grows beyond the bound.
func TestChainCacheBounded(t *testing.T) {
	ca := newTestCA(t, "ca")
	now := time.Now()
	c := &chainCache{pool: ca.pool, now: func() time.Time { return now },
		verify: func(leaf *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error) {
			return leaf.Verify(opts)
		},
		entries: map[[32]byte]time.Time{}}
	for i := range maxCachedChains {
		c.entries[chainKey([][]byte{{byte(i), byte(i >> 8)}})] = now.Add(time.Hour)
	}
	expired := chainKey([][]byte{[]byte("expired")})
	delete(c.entries, chainKey([][]byte{{0, 0}}))
	c.entries[expired] = now.Add(-time.Second)
	if err := c.verifyPeer(ca.issue(t, "new", x509.ExtKeyUsageClientAuth, now.Add(time.Hour)).Certificate, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.entries[expired]; ok || len(c.entries) != maxCachedChains {
		t.Errorf("%d entries, expired kept %v; want %d, the expired one dropped", len(c.entries), ok, maxCachedChains)
	}
	for i := range 10 {
		_ = c.verifyPeer(ca.issue(t, "more", x509.ExtKeyUsageClientAuth, now.Add(time.Duration(i+1)*time.Hour)).Certificate, nil)
	}
	if len(c.entries) > maxCachedChains {
		t.Errorf("%d entries, over the bound %d", len(c.entries), maxCachedChains)
	}
}

// TestCacheClientVerification: over real handshakes, a client with the
// CA's certificate gets in (its certificates in the state), one without a
// certificate or with another CA's does not; configs that verify no
// client certificates are left alone.
func TestCacheClientVerification(t *testing.T) {
	ca, other := newTestCA(t, "ca"), newTestCA(t, "other")
	srv := ca.issue(t, "server", x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour))
	cfg := &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	CacheClientVerification(cfg)
	if cfg.ClientAuth != tls.RequireAnyClientCert || cfg.VerifyPeerCertificate == nil || cfg.ClientCAs == nil {
		t.Fatalf("config not switched to the cache: %v", cfg.ClientAuth)
	}
	handshake := func(client []tls.Certificate) (tls.ConnectionState, error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		done := make(chan error, 1)
		go func() {
			c := tls.Client(a, &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", Certificates: client})
			err := c.Handshake()
			if err == nil {
				// TLS 1.3: the server's verdict on the client arrives
				// after the client's handshake; a read surfaces it.
				_, err = c.Read(make([]byte, 1))
			}
			done <- err
		}()
		s := tls.Server(b, cfg)
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		cerr := <-done
		return s.ConnectionState(), errors.Join(err, cerr)
	}
	good := ca.issue(t, "client", x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
	for i := range 2 {
		st, err := handshake([]tls.Certificate{good})
		if err != nil || len(st.PeerCertificates) != 1 || st.PeerCertificates[0].Subject.CommonName != "client" {
			t.Fatalf("handshake %d with the CA's client certificate: %v, peer %v", i, err, st.PeerCertificates)
		}
	}
	if _, err := handshake(nil); err == nil {
		t.Error("a client without a certificate got in")
	}
	if _, err := handshake([]tls.Certificate{other.issue(t, "client", x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))}); err == nil {
		t.Error("a client with another CA's certificate got in")
	}
	for name, c := range map[string]*tls.Config{
		"no client CAs": {ClientAuth: tls.RequireAndVerifyClientCert},
		"optional":      {ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.pool},
		"own verifier":  {ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool, VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { return nil }},
	} {
		before := c.ClientAuth
		CacheClientVerification(c)
		if c.ClientAuth != before {
			t.Errorf("%s: ClientAuth changed to %v", name, c.ClientAuth)
		}
	}
	CacheClientVerification(nil)
}
