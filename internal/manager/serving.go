package manager

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/serving"
)

// health tracks what /healthz, /livez and /readyz report.
type health struct {
	// ready is true once informers synced and controllers started (or this
	// replica is a healthy standby).
	ready atomic.Bool
	// leaderStale is set when leader election can no longer renew.
	leaderStale atomic.Bool
}

func (h *health) handler(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}
}

func (h *health) live() error {
	if h.leaderStale.Load() {
		return errors.New("leader election: lease not renewed")
	}
	return nil
}

func (h *health) readiness() error {
	if err := h.live(); err != nil {
		return err
	}
	if !h.ready.Load() {
		return errors.New("not ready: waiting for caches or the leader lease")
	}
	return nil
}

// Serving timeouts: a client that is slow to send its request or to read
// the answer, or that keeps an idle connection open, does not hold a
// connection and a goroutine for long. WriteTimeout covers the wait for a
// token review (authSlotWait + authReviewTimeout) and gathering /metrics.
const (
	serveReadHeaderTimeout = 10 * time.Second
	serveReadTimeout       = 30 * time.Second
	serveWriteTimeout      = 30 * time.Second
	serveIdleTimeout       = 90 * time.Second
	// serveMaxHeaderBytes: room for large OIDC tokens, not for megabytes.
	serveMaxHeaderBytes = 128 << 10
)

// serve runs the HTTPS endpoint until ctx is done; it returns the bound
// address once listening. restCfg is the CCM's client configuration; the
// token and access reviews of /metrics use a client of their own derived
// from it (authClientConfig).
func serve(ctx context.Context, o *Options, h *health, reg *prometheus.Registry, restCfg *rest.Config) (string, <-chan error, error) {
	cert, err := servingCert(o)
	if err != nil {
		return "", nil, err
	}
	authClient, err := kubernetes.NewForConfig(authClientConfig(restCfg))
	if err != nil {
		return "", nil, fmt.Errorf("client for token reviews: %w", err)
	}
	minTLS, suites, err := o.tlsSettings()
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", h.handler(h.live))
	mux.HandleFunc("/livez", h.handler(h.live))
	mux.HandleFunc("/readyz", h.handler(h.readiness))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)))
	if err != nil {
		return "", nil, fmt.Errorf("--secure-port %d: %w", o.SecurePort, err)
	}
	srv := &http.Server{
		Handler:           newDelegatedAuth(authClient, o.AlwaysAllowPaths).wrap(mux),
		ReadHeaderTimeout: serveReadHeaderTimeout,
		ReadTimeout:       serveReadTimeout,
		WriteTimeout:      serveWriteTimeout,
		IdleTimeout:       serveIdleTimeout,
		MaxHeaderBytes:    serveMaxHeaderBytes,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: minTLS, CipherSuites: suites},
		ErrorLog:          serving.ErrorLog(klog.FromContext(ctx)),
	}
	errc := make(chan error, 1)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
		close(errc)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	klog.FromContext(ctx).Info("Serving health and metrics", "address", "https://"+ln.Addr().String())
	return ln.Addr().String(), errc, nil
}

// servingCert loads --tls-cert-file, or makes a self-signed certificate.
func servingCert(o *Options) (tls.Certificate, error) {
	if o.CertFile != "" {
		return tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "portside-ccm"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
