package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/serving"
)

// ServeOptions say how the webhooks are served (upstream's --webhook-*
// flags) and which.
type ServeOptions struct {
	// BindAddress and Port are where to listen; Port 0 picks a free port.
	// (--webhook-secure-port=0 disabling webhooks is the caller's to
	// decide.) Listener, when set, is used instead.
	BindAddress string
	Port        int
	Listener    net.Listener

	// CertFile and KeyFile win over CertDir; with CertDir alone the pair
	// CertDir/PairName.crt|.key is served, generated when missing; with
	// neither, a self-signed pair kept in memory. Files are re-read when
	// they change.
	CertDir, CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require a client
	// certificate signed by one of its CAs (the apiserver's, from its
	// admission kubeconfig): a request without one is refused during the
	// TLS handshake, before any webhook (or provider call) runs.
	ClientCAFile string
	// MinTLSVersion (default TLS 1.2), CipherSuites and CurvePreferences
	// (default Go's).
	MinTLSVersion    uint16
	CipherSuites     []uint16
	CurvePreferences []tls.CurveID
	DisableHTTP2     bool

	// Webhooks are the enabled webhooks (see Enabled), built with Context.
	Webhooks []Webhook
	Context  *Context
	// Registry gets the serving metrics; nil: none are registered.
	Registry prometheus.Registerer
}

// Serving timeouts: an admission review is answered within the apiserver's
// timeout (at most 30s); slow or idle clients do not hold connections.
const (
	serveReadHeaderTimeout = 10 * time.Second
	serveReadTimeout       = 30 * time.Second
	serveWriteTimeout      = 35 * time.Second
	serveIdleTimeout       = 90 * time.Second
	serveMaxHeaderBytes    = 64 << 10
	shutdownTimeout        = 5 * time.Second
)

// Serve builds the webhooks and serves them over HTTPS, each on its Path,
// with /healthz, until ctx is done. It returns the bound address once
// listening; errc gets the server's error, if any, and is closed when it
// stops. Webhooks whose New returns a skip are logged and not served.
// Serve closes o.Listener when it fails, and when ctx is done.
func Serve(ctx context.Context, o ServeOptions) (addr string, errc <-chan error, err error) {
	logger := klog.FromContext(ctx).WithName("webhooks")
	if o.Listener != nil {
		defer func() {
			if err != nil {
				_ = o.Listener.Close()
			}
		}()
	}
	m := newMetrics(o.Registry)
	wc := o.Context
	if wc == nil {
		wc = &Context{}
	}
	if wc.Metrics == nil {
		c := *wc
		c.Metrics = o.Registry
		wc = &c
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	var served []string
	for _, w := range o.Webhooks {
		if !strings.HasPrefix(w.Path, "/") || w.Path == "/healthz" {
			return "", nil, fmt.Errorf("webhook %s: path %q must start with / and not be /healthz", w.Name, w.Path)
		}
		wlog := logger.WithValues("webhook", w.Name)
		a, skip, err := w.New(klog.NewContext(ctx, wlog), wc)
		if err != nil {
			return "", nil, fmt.Errorf("webhook %s: %w", w.Name, err)
		}
		if skip != "" {
			logger.Info("Webhook not served", "webhook", w.Name, "reason", skip)
			continue
		}
		if a == nil {
			return "", nil, fmt.Errorf("webhook %s: New returned no Admitter", w.Name)
		}
		mux.Handle(w.Path, &handler{name: w.Name, admitter: a, metrics: m, logger: wlog})
		served = append(served, w.Name+" "+w.Path)
	}
	ln := o.Listener
	host := o.BindAddress
	if ln == nil {
		if ln, err = net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.Port))); err != nil {
			return "", nil, fmt.Errorf("--webhook-secure-port %d: %w", o.Port, err)
		}
	} else if h, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		host = h
	}
	certs, err := newCertSource(o, host, logger, m)
	if err != nil {
		if o.Listener == nil {
			_ = ln.Close()
		}
		return "", nil, err
	}
	clientAuth, clientCAs := tls.NoClientCert, (*x509.CertPool)(nil)
	if o.ClientCAFile != "" {
		if clientCAs, err = loadCAs(o.ClientCAFile); err != nil {
			if o.Listener == nil {
				_ = ln.Close()
			}
			return "", nil, err
		}
		clientAuth = tls.RequireAndVerifyClientCert
	}
	minTLS := o.MinTLSVersion
	if minTLS == 0 {
		minTLS = tls.VersionTLS12
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: serveReadHeaderTimeout,
		ReadTimeout:       serveReadTimeout,
		WriteTimeout:      serveWriteTimeout,
		IdleTimeout:       serveIdleTimeout,
		MaxHeaderBytes:    serveMaxHeaderBytes,
		TLSConfig: &tls.Config{
			GetCertificate:   certs.GetCertificate,
			MinVersion:       minTLS,
			CipherSuites:     o.CipherSuites,
			CurvePreferences: o.CurvePreferences,
			ClientAuth:       clientAuth,
			ClientCAs:        clientCAs,
		},
		ErrorLog: serving.ErrorLog(logger),
	}
	if o.DisableHTTP2 {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
	}
	ch := make(chan error, 1)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			ch <- fmt.Errorf("serving webhooks: %w", err)
		}
		close(ch)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	addr = ln.Addr().String()
	logger.Info("Serving webhooks", "address", "https://"+addr, "webhooks", served, "clientCAFile", o.ClientCAFile)
	return addr, ch, nil
}

// loadCAs reads the PEM CA certificates of --webhook-client-ca-file.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--webhook-client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--webhook-client-ca-file %s: no PEM CA certificate in it (give the CA that signs the apiserver's admission client certificate)", file)
	}
	return pool, nil
}
