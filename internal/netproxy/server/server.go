// Package server is the Portside network proxy server: a drop-in for
// upstream konnectivity's proxy-server. kube-apiserver dials through it
// (gRPC ProxyService or HTTP CONNECT); agents connect to it with
// AgentService and carry the dials into the cluster network.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/portside-io/portside/internal/netproxy"
)

// Frontend modes, upstream's --mode values.
const (
	ModeGRPC        = "grpc"
	ModeHTTPConnect = "http-connect"
)

// ErrNoAgent is the dial error when no connected agent may serve the
// address; the text is upstream's.
//
//lint:ignore ST1005 upstream's wording, which tools and kube-apiserver users match
var ErrNoAgent = errors.New("No agent available")

// Options configures a Server. Addresses are host:port ("127.0.0.1:0"
// picks a free port); an empty health or admin address disables it.
type Options struct {
	Mode string
	// UDSName, when set, is the frontend's unix socket; otherwise the
	// frontend listens on FrontendAddress with FrontendTLS (mTLS when its
	// ClientCAs is set).
	UDSName         string
	DeleteUDSFile   bool
	FrontendAddress string
	FrontendTLS     *tls.Config
	// AgentTLS nil means plaintext, for tests and token-authenticated
	// agents behind a TLS-terminating load balancer.
	AgentAddress  string
	AgentTLS      *tls.Config
	HealthAddress string
	AdminAddress  string

	ServerID    string
	ServerCount int
	// Leases, if set, publishes this server's Lease and counts the live
	// servers' (--enable-lease-controller): agents are told that count
	// (never less than ServerCount).
	Leases     *LeasePublisher
	Strategies []Strategy
	TokenAuth  *TokenAuth
	// CertificateAgents (--allow-certificate-agents), with TokenAuth:
	// an agent that sends no token but a verified client certificate is
	// named by the certificate (authBy).
	CertificateAgents bool
	// NodeClient reads Nodes, whose names and addresses are what a
	// node-bound agent may claim; nil grants node-bound agents no host or
	// address identifiers.
	NodeClient kubernetes.Interface
	// RouteClaims are the users and groups (--allow-route-claims) whose
	// agents may claim cidr, default-route and addresses not their node's.
	RouteClaims []string
	// StreamLimits cap agent control streams per connection and per
	// unauthenticated peer address (admission.go).
	StreamLimits StreamLimits

	// BackendDialTimeout fails a dial the agent has not answered in time;
	// zero waits for the agent (upstream's default).
	BackendDialTimeout      time.Duration
	GracefulShutdownTimeout time.Duration
	KeepaliveTime           time.Duration
	FrontendKeepaliveTime   time.Duration

	// DisableStreams refuses the streams-v1 extension, so Portside agents
	// behave exactly as with an upstream server (tests, comparisons).
	DisableStreams bool
	// DisableLink offers agents only gRPC (h2) on the agent port, not
	// portside-link/2 (--portside-link=false): for comparisons, and a
	// way back should the link misbehave. Plaintext agent ports never
	// offer it (ALPN needs TLS).
	DisableLink bool

	EnableProfiling bool

	// Registry receives the server's metrics; New creates one when nil.
	Registry *prometheus.Registry
}

// Server is a running (or runnable) proxy server.
type Server struct {
	opts   Options
	logger logr.Logger
	m      *metrics
	reg    *prometheus.Registry
	// metricsHandler serves /metrics on the health and admin ports.
	metricsHandler http.Handler
	readyMu        sync.Mutex // readyBackendsChanged

	backends  registry
	admission admission

	frontendLn, agentLn, healthLn, adminLn net.Listener
	agentPort                              *agentPort // the TLS agent port's ALPN demultiplexer
	links                                  linkSessions
	nodes                                  *nodeCache
	frontendGRPC, agentGRPC                *grpc.Server
	frontendHTTP, healthHTTP, adminHTTP    *http.Server

	closeWait time.Duration

	stopping atomic.Bool
	httpMu   sync.Mutex
	httpConn map[net.Conn]struct{}
	httpWG   sync.WaitGroup
	liveConn atomic.Int64
}

// New validates opts and opens the listeners, so the addresses are known
// before Run.
func New(opts Options) (_ *Server, err error) {
	if opts.Mode == "" {
		opts.Mode = ModeGRPC
	}
	if opts.Mode != ModeGRPC && opts.Mode != ModeHTTPConnect {
		return nil, fmt.Errorf("mode %q: want %q or %q", opts.Mode, ModeGRPC, ModeHTTPConnect)
	}
	if opts.ServerCount < 1 {
		opts.ServerCount = 1
	}
	if opts.ServerID == "" {
		opts.ServerID = newSession()[:16]
	}
	if len(opts.Strategies) == 0 {
		opts.Strategies = []Strategy{StrategyDefault}
	}
	if opts.GracefulShutdownTimeout <= 0 {
		opts.GracefulShutdownTimeout = 15 * time.Second
	}
	if opts.TokenAuth != nil && opts.TokenAuth.Client == nil {
		return nil, errors.New("agent token authentication needs a Kubernetes client")
	}
	if opts.TokenAuth != nil && opts.TokenAuth.Audience == "" {
		return nil, errors.New("agent token authentication needs an audience: set --authentication-audience to the audience of the agents' projected tokens (e.g. system:konnectivity-server)")
	}
	s := &Server{opts: opts, reg: opts.Registry, closeWait: defaultCloseWait, httpConn: map[net.Conn]struct{}{},
		backends: registry{bySession: map[string]*backend{}}}
	if s.reg == nil {
		// A process's own registry: with the Go and process collectors,
		// as upstream's proxy-server serves (Prometheus's default registry).
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.m = newMetrics(s.reg)
	// promhttp_metric_handler_* as upstream's promhttp.Handler() has them.
	gather := promhttp.InstrumentMetricHandler(s.reg, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.metricsHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.m.fullRecv.refresh()
		gather.ServeHTTP(w, r)
	})
	if opts.Leases != nil {
		opts.Leases.m = s.m
	}
	s.readyBackendsChanged() // 0 per strategy until an agent connects
	if opts.TokenAuth != nil {
		opts.TokenAuth.m.Store(s.m)
	}
	s.logger = klog.Background().WithName("proxy-server").WithValues("serverID", opts.ServerID)
	defer func() {
		if err != nil {
			s.closeListeners()
		}
	}()
	if opts.UDSName != "" {
		// Mode 0660 from the start: see listenUnix. With DeleteUDSFile a
		// stale socket is replaced atomically, as upstream removes it.
		if s.frontendLn, err = listenUnix(opts.UDSName, opts.DeleteUDSFile); err != nil {
			return nil, err
		}
	} else {
		if s.frontendLn, err = net.Listen("tcp", opts.FrontendAddress); err != nil {
			return nil, fmt.Errorf("frontend listener: %w", err)
		}
	}
	if opts.Mode == ModeHTTPConnect {
		// Under TLS, if any: the link's reader writes to clients without
		// waiting (trywrite.go).
		s.frontendLn = tryListener{s.frontendLn}
		if opts.FrontendTLS != nil && opts.UDSName == "" {
			s.frontendLn = tls.NewListener(s.frontendLn, opts.FrontendTLS)
		}
	}
	if s.agentLn, err = net.Listen("tcp", opts.AgentAddress); err != nil {
		return nil, fmt.Errorf("agent listener: %w", err)
	}
	if opts.HealthAddress != "" {
		if s.healthLn, err = net.Listen("tcp", opts.HealthAddress); err != nil {
			return nil, fmt.Errorf("health listener: %w", err)
		}
	}
	if opts.AdminAddress != "" {
		if s.adminLn, err = net.Listen("tcp", opts.AdminAddress); err != nil {
			return nil, fmt.Errorf("admin listener: %w", err)
		}
	}
	if opts.NodeClient != nil {
		s.nodes = newNodeCache(opts.NodeClient, s.nodeChanged)
	}
	s.build()
	return s, nil
}

func (s *Server) build() {
	opts := s.opts
	agentOpts := netproxy.ServerOptions(opts.KeepaliveTime)
	if opts.AgentTLS != nil {
		// The agent port runs the handshakes itself, so that ALPN picks
		// portside-link/2 or gRPC; gRPC gets connections handshaken.
		s.agentPort = newAgentPort(s, s.agentLn)
		agentOpts = append(agentOpts, grpc.Creds(handshakenCreds{}))
	}
	s.agentGRPC = grpc.NewServer(agentOpts...)
	agentpb.RegisterAgentServiceServer(s.agentGRPC, agentService{s: s})

	switch opts.Mode {
	case ModeGRPC:
		feOpts := netproxy.ServerOptions(opts.FrontendKeepaliveTime)
		if opts.FrontendTLS != nil && opts.UDSName == "" {
			feOpts = append(feOpts, grpc.Creds(credentials.NewTLS(opts.FrontendTLS)))
		}
		s.frontendGRPC = grpc.NewServer(feOpts...)
		client.RegisterProxyServiceServer(s.frontendGRPC, proxyService{s: s})
	case ModeHTTPConnect:
		s.frontendHTTP = netproxy.NewHTTPServer(httpConnect{s: s}, log.New(klogWriter{s}, "", 0))
	}
	if s.healthLn != nil {
		s.healthHTTP = netproxy.NewHTTPServer(s.healthMux(), nil)
	}
	if s.adminLn != nil {
		s.adminHTTP = netproxy.NewHTTPServer(s.adminMux(), nil)
	}
}

// Addresses of the listeners, for tests and logs.
func (s *Server) FrontendAddr() net.Addr { return s.frontendLn.Addr() }
func (s *Server) AgentAddr() net.Addr    { return s.agentLn.Addr() }
func (s *Server) HealthAddr() net.Addr   { return addrOf(s.healthLn) }
func (s *Server) AdminAddr() net.Addr    { return addrOf(s.adminLn) }

// ID is the server ID told to agents.
func (s *Server) ID() string { return s.opts.ServerID }

// Registry holds the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// serverCount is what agents are told: counted from Leases when they are
// published, else the static --server-count.
func (s *Server) serverCount() int {
	if s.opts.Leases != nil {
		return max(s.opts.Leases.Count(), s.opts.ServerCount)
	}
	return s.opts.ServerCount
}

// AgentCount is the number of connected agent control streams.
func (s *Server) AgentCount() int { return s.backends.len() }

// StreamsV1Agents is how many of the connected agent control streams
// negotiated streams-v1 (a stream per connection); the others speak
// upstream's single-stream protocol. Both carry bytes correctly, so a test
// of one protocol cannot tell from the traffic alone which one it ran.
func (s *Server) StreamsV1Agents() int { return s.backends.streamsV1() }

// Ready is true while the server has an agent and is not shutting down.
func (s *Server) Ready() bool { return !s.stopping.Load() && s.backends.len() > 0 }

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

// Run serves until ctx is cancelled, then drains: it stops accepting
// frontends, lets open tunnels finish for up to GracefulShutdownTimeout,
// and closes everything.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("proxy-server").WithValues("serverID", s.opts.ServerID)
	s.logger = logger
	errc := make(chan error, 4)
	serve := func(name string, f func() error) {
		go func() {
			// The label is inherited by every goroutine the server starts,
			// so a CPU profile splits into the frontend's and the agent
			// link's costs (pprof -tagfocus=listener=...), as upstream
			// labels its own.
			var err error
			pprof.Do(context.Background(), pprof.Labels("listener", name), func(context.Context) { err = f() })
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if s.nodes != nil {
		s.nodes.start()
		defer s.nodes.shutdown()
	}
	if s.agentPort != nil {
		serve("agent port", s.agentPort.serve)
		serve("agent server", func() error { return s.agentGRPC.Serve(s.agentPort) })
	} else {
		serve("agent server", func() error { return s.agentGRPC.Serve(s.agentLn) })
	}
	if s.frontendGRPC != nil {
		serve("frontend server", func() error { return s.frontendGRPC.Serve(s.frontendLn) })
	} else {
		serve("frontend server", func() error { return s.frontendHTTP.Serve(s.frontendLn) })
	}
	if s.healthHTTP != nil {
		serve("health server", func() error { return s.healthHTTP.Serve(s.healthLn) })
	}
	if s.adminHTTP != nil {
		serve("admin server", func() error { return s.adminHTTP.Serve(s.adminLn) })
	}
	if s.opts.Leases != nil {
		leaseCtx, stopLeases := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
		leasesDone := make(chan struct{})
		go func() { defer close(leasesDone); s.opts.Leases.Run(leaseCtx) }()
		// Stopped after the drain below: the Lease goes when the server does.
		defer func() { stopLeases(); <-leasesDone }()
	}
	logger.Info("Proxy server running", "mode", s.opts.Mode, "frontend", s.FrontendAddr().String(),
		"agent", s.AgentAddr().String(), "serverCount", s.opts.ServerCount, "strategies", s.opts.Strategies,
		"streamsV1", !s.opts.DisableStreams, "link", s.agentPort != nil && !s.opts.DisableLink)
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.shutdown(logger)
	return runErr
}

func (s *Server) shutdown(logger logr.Logger) {
	s.stopping.Store(true)
	logger.Info("Draining proxy server", "timeout", s.opts.GracefulShutdownTimeout, "liveConnections", s.liveConn.Load())
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if s.frontendGRPC != nil {
			s.frontendGRPC.GracefulStop()
		} else {
			_ = s.frontendHTTP.Close() // hijacked tunnels are not closed by this
			s.httpWG.Wait()
		}
	}()
	select {
	case <-drained:
	case <-time.After(s.opts.GracefulShutdownTimeout):
		logger.Info("Graceful shutdown timed out; closing remaining tunnels", "liveConnections", s.liveConn.Load())
	}
	if s.frontendGRPC != nil {
		s.frontendGRPC.Stop()
	}
	s.httpMu.Lock()
	for c := range s.httpConn {
		_ = c.Close()
	}
	s.httpMu.Unlock()
	<-drained
	s.agentGRPC.Stop()
	if s.agentPort != nil {
		_ = s.agentPort.Close()
	}
	s.links.closeAll()
	if s.healthHTTP != nil {
		_ = s.healthHTTP.Close()
	}
	if s.adminHTTP != nil {
		_ = s.adminHTTP.Close()
	}
	if s.opts.UDSName != "" {
		_ = os.Remove(s.opts.UDSName)
	}
	logger.Info("Proxy server stopped")
}

func (s *Server) closeListeners() {
	for _, l := range []net.Listener{s.frontendLn, s.agentLn, s.healthLn, s.adminLn} {
		if l != nil {
			_ = l.Close()
		}
	}
}

func (s *Server) trackHTTP(c net.Conn, add bool) {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if add {
		s.httpConn[c] = struct{}{}
		s.httpWG.Add(1)
	} else {
		delete(s.httpConn, c)
		s.httpWG.Done()
	}
}

// klogWriter routes net/http's error log (TLS handshake failures of
// frontends) to the contextual logger instead of stderr.
type klogWriter struct{ s *Server }

func (w klogWriter) Write(p []byte) (int, error) {
	w.s.logger.V(2).Info("HTTP frontend", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

func containsFold(s, sub string) bool { return strings.Contains(strings.ToLower(s), sub) }
