package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// PairName is upstream's name of the generated pair in --webhook-cert-dir:
// <dir>/cloud-controller-manager-webhook.crt and .key.
const PairName = "cloud-controller-manager-webhook"

// reloadCheckInterval: the certificate files are looked at (stat) at most
// this often, on a TLS handshake.
const reloadCheckInterval = time.Second

// certSource serves the certificate through tls.Config.GetCertificate. A
// pair of files is re-read when either file's modification time or size
// changed; a pair that does not load is logged once and the previous one
// is served on.
type certSource struct {
	certFile, keyFile string // "" for a fixed, in-memory certificate
	logger            klog.Logger
	metrics           *metrics

	mu      sync.Mutex
	cert    *tls.Certificate
	loaded  fileState // the files' state when cert was loaded
	failed  fileState // the last state that did not load (already logged)
	checked time.Time
}

// fileState identifies a version of the pair, as stat sees it.
type fileState struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
	err               string
}

func statPair(certFile, keyFile string) fileState {
	var st fileState
	c, err := os.Stat(certFile)
	if err != nil {
		return fileState{err: err.Error()}
	}
	k, err := os.Stat(keyFile)
	if err != nil {
		return fileState{err: err.Error()}
	}
	st.certMod, st.certSize, st.keyMod, st.keySize = c.ModTime(), c.Size(), k.ModTime(), k.Size()
	return st
}

// newFileSource loads the pair; it fails when the pair does not load now.
func newFileSource(certFile, keyFile string, logger klog.Logger, m *metrics) (*certSource, error) {
	s := &certSource{certFile: certFile, keyFile: keyFile, logger: logger, metrics: m, checked: time.Now()}
	s.loaded = statPair(certFile, keyFile)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("webhook serving certificate %s, key %s: %w", certFile, keyFile, err)
	}
	s.cert = &cert
	return s, nil
}

func (s *certSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s.certFile == "" {
		return s.cert, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.checked) >= reloadCheckInterval {
		s.checked = now
		s.reload()
	}
	return s.cert, nil
}

// reload re-reads the pair if the files changed; s.mu is held.
func (s *certSource) reload() {
	st := statPair(s.certFile, s.keyFile)
	if st == s.loaded || st == s.failed {
		return
	}
	var cert tls.Certificate
	err := errors.New(st.err)
	if st.err == "" {
		cert, err = tls.LoadX509KeyPair(s.certFile, s.keyFile)
	}
	if err != nil {
		s.failed = st
		s.metrics.reloads.WithLabelValues("invalid").Inc()
		s.logger.Error(err, "Webhook serving certificate changed but does not load; serving the previous one until the files change again",
			"certFile", s.certFile, "keyFile", s.keyFile)
		return
	}
	s.cert, s.loaded, s.failed = &cert, st, fileState{}
	s.metrics.reloads.WithLabelValues("loaded").Inc()
	s.logger.Info("Reloaded the webhook serving certificate", append([]any{"certFile", s.certFile}, certLogValues(&cert)...)...)
}

func certLogValues(c *tls.Certificate) []any {
	if c.Leaf == nil {
		return nil
	}
	return []any{"serial", c.Leaf.SerialNumber.Text(16), "notAfter", c.Leaf.NotAfter.UTC().Format(time.RFC3339)}
}

// newCertSource picks the certificate, as upstream: the explicit files;
// else the pair in certDir, generated there (self-signed) when missing;
// else a self-signed pair in memory.
func newCertSource(o ServeOptions, host string, logger klog.Logger, m *metrics) (*certSource, error) {
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, errors.New("--webhook-tls-cert-file and --webhook-tls-private-key-file go together")
		}
		return newFileSource(o.CertFile, o.KeyFile, logger, m)
	}
	if o.CertDir != "" {
		certFile, keyFile := filepath.Join(o.CertDir, PairName+".crt"), filepath.Join(o.CertDir, PairName+".key")
		_, cerr := os.Stat(certFile)
		_, kerr := os.Stat(keyFile)
		switch {
		case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
			certPEM, keyPEM, err := selfSigned(host)
			if err != nil {
				return nil, err
			}
			if err := os.MkdirAll(o.CertDir, 0o700); err != nil {
				return nil, fmt.Errorf("--webhook-cert-dir: %w", err)
			}
			if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
				return nil, fmt.Errorf("--webhook-cert-dir: %w", err)
			}
			if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
				return nil, fmt.Errorf("--webhook-cert-dir: %w", err)
			}
			logger.Info("Generated a self-signed webhook serving certificate", "certFile", certFile, "keyFile", keyFile)
		case cerr != nil || kerr != nil:
			return nil, fmt.Errorf("--webhook-cert-dir: need both %s and %s, or neither (to generate them): %v", certFile, keyFile, errors.Join(cerr, kerr))
		}
		return newFileSource(certFile, keyFile, logger, m)
	}
	certPEM, keyPEM, err := selfSigned(host)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	logger.Info("Serving webhooks with a self-signed certificate kept in memory (no --webhook-tls-cert-file or --webhook-cert-dir): the apiserver needs its caBundle, which changes on every start")
	return &certSource{cert: &cert, logger: logger, metrics: m}, nil
}

// selfSigned makes an ECDSA P-256 certificate for localhost, the loopback
// addresses, the host name and host (the bind address, when specific),
// valid for a year, as PEM.
func selfSigned(host string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", PairName, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
