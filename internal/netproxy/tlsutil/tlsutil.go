// Package tlsutil builds the proxy's TLS configurations from upstream's
// certificate flags.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// Server returns a serving config; with caFile set, clients must present a
// certificate signed by it (mTLS). cipherSuites and minVersion are the
// --cipher-suites and --tls-min-version values (see Ciphers, MinVersion).
func Server(certFile, keyFile, caFile string, cipherSuites []string, minVersion string) (*tls.Config, error) {
	minV, err := MinVersion(minVersion)
	if err != nil {
		return nil, err
	}
	ciphers, err := Ciphers(cipherSuites)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading serving certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: minV, CipherSuites: ciphers}
	if caFile != "" {
		pool, err := Pool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns a config for the agent; an empty caFile trusts the
// system roots, as upstream's agent does.
func Client(caFile, certFile, keyFile, serverName string, alpn []string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: alpn}
	if caFile != "" {
		pool, err := Pool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Pool reads a PEM bundle.
func Pool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificates in %s", caFile)
	}
	return pool, nil
}

// Ciphers maps --cipher-suites names to IDs. The names accepted are
// upstream proxy-server's: Go's names of the suites crypto/tls considers
// secure (tls.CipherSuites(), TLS 1.3 ones included, which Go always
// enables anyway). A suite of tls.InsecureCipherSuites() is refused, not
// silently enabled: that list (RC4, 3DES, the CBC-SHA256 suites and, in
// current Go, RSA key exchange, which has no forward secrecy) is broken or
// attackable, and a flag naming one is a mistake to fix, not to honour.
// Surrounding spaces are trimmed ("A, B" is a common spelling).
func Ciphers(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	secure := map[string]uint16{}
	for _, c := range tls.CipherSuites() {
		secure[c.Name] = c.ID
	}
	insecure := map[string]bool{}
	for _, c := range tls.InsecureCipherSuites() {
		insecure[c.Name] = true
	}
	var ids []uint16
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		id, ok := secure[n]
		switch {
		case ok:
			ids = append(ids, id)
		case insecure[n]:
			return nil, fmt.Errorf("--cipher-suites: %s is insecure (Go's crypto/tls lists it in InsecureCipherSuites); remove it, or leave --cipher-suites empty for Go's defaults; secure suites: %s", n, strings.Join(SecureCipherNames(), ","))
		default:
			return nil, fmt.Errorf("--cipher-suites: unknown cipher suite %q; secure suites: %s", n, strings.Join(SecureCipherNames(), ","))
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--cipher-suites %q names no cipher suite; leave it empty for Go's defaults", strings.Join(names, ","))
	}
	return ids, nil
}

// SecureCipherNames are the names Ciphers accepts, in crypto/tls's order.
func SecureCipherNames() []string {
	var out []string
	for _, c := range tls.CipherSuites() {
		out = append(out, c.Name)
	}
	return out
}

// MinVersion maps a --tls-min-version value (upstream's later proxy-server
// flag: VersionTLS10 … VersionTLS13) to its ID; empty is TLS 1.2. Versions
// below 1.2 are refused, where upstream only warns: TLS 1.0 and 1.1 are
// deprecated (RFC 8996) and nothing that speaks to the proxy needs them.
func MinVersion(name string) (uint16, error) {
	switch strings.TrimSpace(name) {
	case "", "VersionTLS12":
		return tls.VersionTLS12, nil
	case "VersionTLS13":
		return tls.VersionTLS13, nil
	case "VersionTLS10", "VersionTLS11":
		return 0, fmt.Errorf("--tls-min-version=%s is below TLS 1.2, which is insecure (RFC 8996); use VersionTLS12 or VersionTLS13", name)
	default:
		return 0, fmt.Errorf("--tls-min-version=%s: unknown version; use VersionTLS12 or VersionTLS13", name)
	}
}
