package tlsutil

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// kube-apiserver's HTTP-CONNECT egress makes one mTLS connection per dial
// and never resumes a session, so the proxy server verified the same
// client chain again on every dial: chain building and the CA's signature
// on the leaf were a quarter of the server's CPU per dial
// (docs/benchmarks.md, "Where the proxies' CPU goes"). A chain is a pure
// function of the certificates presented, the pool and the time, so the
// verdict is kept per exact chain until the earliest NotAfter in it. The
// handshake still checks the client's signature over the transcript with
// the leaf's key (proof of possession) every time: only the verdict on
// the chain itself is reused.

// maxCachedChains bounds the cache: only chains that verified are kept,
// so filling it takes that many valid client certificates; past it one
// entry is dropped per new chain.
const maxCachedChains = 1024

// chainCache keeps verified chains of one pool.
type chainCache struct {
	pool *x509.CertPool
	now  func() time.Time
	// verify is x509's chain verification (a test counts it).
	verify func(leaf *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error)

	mu      sync.Mutex
	entries map[[32]byte]time.Time // chain → verified until
}

// chainKey identifies a presented chain exactly: every certificate's
// DER, length-prefixed so no two chains share a key by concatenation.
func chainKey(raw [][]byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, c := range raw {
		binary.BigEndian.PutUint64(n[:], uint64(len(c)))
		h.Write(n[:])
		h.Write(c)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// verifiedUntil is how long a verdict on chain holds: until the first
// certificate of it expires.
func verifiedUntil(chain []*x509.Certificate) time.Time {
	var until time.Time
	for _, c := range chain {
		if until.IsZero() || c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	return until
}

// verifyPeer is tls.Config.VerifyPeerCertificate for ClientAuth
// RequireAnyClientCert: what RequireAndVerifyClientCert verifies (a chain
// to the pool, for client authentication), from the cache when the same
// certificates verified before and none has expired since.
func (c *chainCache) verifyPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return errors.New("tls: client didn't provide a certificate")
	}
	now := c.now()
	key := chainKey(raw)
	c.mu.Lock()
	until, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		cert, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("tls: failed to parse client certificate: %w", err)
		}
		certs[i] = cert
	}
	opts := x509.VerifyOptions{Roots: c.pool, CurrentTime: now, Intermediates: x509.NewCertPool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, cert := range certs[1:] {
		opts.Intermediates.AddCert(cert)
	}
	chains, err := c.verify(certs[0], opts)
	if err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[32]byte]time.Time{}
	}
	if len(c.entries) >= maxCachedChains {
		for k, u := range c.entries {
			if !now.Before(u) {
				delete(c.entries, k) // expired: of no use
			}
		}
		for k := range c.entries {
			if len(c.entries) < maxCachedChains {
				break
			}
			delete(c.entries, k) // any one
		}
	}
	c.entries[key] = verifiedUntil(chains[0])
	return nil
}

// CacheClientVerification makes a server config that requires verified
// client certificates (Server with a CA file) keep its verdicts per
// chain. Its connections' ConnectionState has PeerCertificates but no
// VerifiedChains, so it is only for listeners that decide nothing by the
// chain beyond its verification: the frontend, not the agent port (whose
// identities read VerifiedChains). Other configs are left as they are.
func CacheClientVerification(cfg *tls.Config) {
	if cfg == nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || cfg.VerifyPeerCertificate != nil {
		return
	}
	c := &chainCache{pool: cfg.ClientCAs, now: time.Now, verify: func(leaf *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error) {
		return leaf.Verify(opts)
	}}
	// ClientCAs stays set: the certificate request still names its CAs.
	cfg.ClientAuth = tls.RequireAnyClientCert
	cfg.VerifyPeerCertificate = c.verifyPeer
}
