// Package netproxytest starts Portside proxy servers, agents, destination
// servers and certificates for tests, on loopback with free ports; all is
// stopped in t.Cleanup.
package netproxytest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// StartServer creates and runs a server; it is stopped at cleanup.
func StartServer(t testing.TB, o server.Options) *server.Server {
	t.Helper()
	if o.AgentAddress == "" {
		o.AgentAddress = "127.0.0.1:0"
	}
	if o.UDSName == "" && o.FrontendAddress == "" {
		o.FrontendAddress = "127.0.0.1:0"
	}
	if o.GracefulShutdownTimeout == 0 {
		o.GracefulShutdownTimeout = time.Second
	}
	s, err := server.New(o)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// StartAgent creates and runs an agent; it is stopped at cleanup. The
// returned stop function stops it earlier (idempotent).
func StartAgent(t testing.TB, o agent.Options) (*agent.Agent, func()) {
	t.Helper()
	if o.SyncInterval == 0 {
		o.SyncInterval = 20 * time.Millisecond
	}
	if o.SyncIntervalCap == 0 {
		o.SyncIntervalCap = 200 * time.Millisecond
	}
	a, err := agent.New(o)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

// Eventually polls cond until it holds or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Listen starts a TCP server on 127.0.0.1:0 running handle per
// connection; it returns the address.
func Listen(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { mu.Lock(); delete(conns, c); mu.Unlock(); c.Close() }()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// Echo copies what it reads back.
func Echo(c net.Conn) { _, _ = io.Copy(c, c) }

// LoadBalancer forwards each TCP connection to the next backend address,
// round robin, like a cloud load balancer in front of proxy servers.
type LoadBalancer struct {
	Addr string
	mu   sync.Mutex
	next int
	to   []string
}

// StartLoadBalancer listens on 127.0.0.1:0.
func StartLoadBalancer(t testing.TB, backends ...string) *LoadBalancer {
	lb := &LoadBalancer{to: backends}
	lb.Addr = Listen(t, func(c net.Conn) {
		lb.mu.Lock()
		to := lb.to[lb.next%len(lb.to)]
		lb.next++
		lb.mu.Unlock()
		up, err := net.Dial("tcp", to)
		if err != nil {
			return
		}
		defer up.Close()
		done := make(chan struct{})
		go func() { _, _ = io.Copy(up, c); up.Close(); close(done) }()
		_, _ = io.Copy(c, up)
		c.Close()
		<-done
	})
	return lb
}

// PKI is a throw-away CA issuing server and client certificates.
type PKI struct {
	Pool *x509.CertPool
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewPKI creates a CA.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "netproxytest-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &PKI{Pool: pool, ca: ca, key: key}
}

var serial = big.NewInt(1)
var serialMu sync.Mutex

func (p *PKI) issue(t testing.TB, cn string, server bool) tls.Certificate {
	t.Helper()
	serialMu.Lock()
	serial = new(big.Int).Add(serial, big.NewInt(1))
	sn := serial
	serialMu.Unlock()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ServerTLS serves 127.0.0.1 and requires clients signed by this CA.
func (p *PKI) ServerTLS(t testing.TB) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.issue(t, "proxy-server", true)},
		ClientCAs: p.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// ServerFiles writes, in dir, this CA's certificate and a serving
// certificate and key for 127.0.0.1 as PEM files, as the proxy's flags
// (--server-cert, --server-key, --server-ca-cert) take them.
func (p *PKI) ServerFiles(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	cert := p.issue(t, "proxy-server", true)
	keyDER, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", p.ca.Raw}, {certFile, "CERTIFICATE", cert.Certificate[0]}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// ClientTLS trusts this CA and presents a client certificate for cn
// (none when cn is empty).
func (p *PKI) ClientTLS(t testing.TB, cn string) *tls.Config {
	cfg := &tls.Config{RootCAs: p.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cn != "" {
		cfg.Certificates = []tls.Certificate{p.issue(t, cn, false)}
	}
	return cfg
}
