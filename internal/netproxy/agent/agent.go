// Package agent is the Portside network proxy agent: a drop-in for
// upstream konnectivity's proxy-agent. It keeps a control stream to every
// proxy server behind the configured address and dials, in the cluster
// network, the destinations the servers ask for.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/netproxy"
)

// Options configures an Agent.
type Options struct {
	// ServerAddress is host:port of the proxy server(s), often a load
	// balancer in front of several.
	ServerAddress    string
	AgentID          string
	AgentIdentifiers string // URL-encoded: ipv4, ipv6, host, cidr, default-route

	SyncInterval    time.Duration // first retry delay, doubled up to SyncIntervalCap
	SyncIntervalCap time.Duration
	ProbeInterval   time.Duration
	// SyncForever keeps connecting after serverCount servers are held, so
	// a raised server count is noticed.
	SyncForever bool

	// CountServerLeases (upstream --count-server-leases) counts the valid
	// server Leases in LeaseNamespace matching LeaseSelector, with
	// Kubernetes; ServerCountSource (upstream --server-count-source)
	// combines that count with the servers' serverCount header:
	// decideServerCount.
	CountServerLeases bool
	LeaseNamespace    string
	LeaseSelector     labels.Selector
	ServerCountSource string
	Kubernetes        kubernetes.Interface

	// TLS nil means plaintext.
	TLS                     *tls.Config
	ServiceAccountTokenPath string
	KeepaliveTime           time.Duration
	DialTimeout             time.Duration
	// DrainTimeout is how long Run waits, after telling servers it drains,
	// for proxied connections to end; 0 waits until they end or ForceStop
	// (a second signal), as upstream's agent, which stops only on a second
	// signal or when the kubelet kills it at the pod's grace period.
	DrainTimeout time.Duration

	// DisableStreams does not offer the streams-v1 extension, so the agent
	// behaves exactly as an upstream agent (tests, comparisons).
	DisableStreams bool
	// DisableLink connects with gRPC only, never offering portside-link/2
	// (--portside-link=false).
	DisableLink bool

	HealthAddress   string
	AdminAddress    string
	EnableProfiling bool
	Registry        *prometheus.Registry
}

// Agent is a running (or runnable) proxy agent.
type Agent struct {
	opts   Options
	logger logr.Logger
	m      *metrics
	reg    *prometheus.Registry

	healthLn, adminLn net.Listener
	metricsHandler    http.Handler

	leases *leaseCounter // nil without CountServerLeases

	mu          sync.Mutex
	sessions    map[string]*session
	headerCount int // serverCount header of the last server newly held
	lastCount   int // the last decided count, to log changes
	draining    bool
	changed     chan struct{}
	// liveConns counts connections from their DIAL_REQ until closed, so
	// a drain does not end between a dial and its answer.
	liveConns atomic.Int64
	lastErr   error
	forceStop chan struct{}
	forceOnce sync.Once
	// noLinkUntil: the server chose gRPC; offer the link again after it.
	noLinkUntil       time.Time
	linkRefusedLogged bool
}

// ForceStop ends a drain at once (upstream's second signal): connections
// still open are closed.
func (a *Agent) ForceStop() { a.forceOnce.Do(func() { close(a.forceStop) }) }

// LastError is the last failure to connect to a server, nil once one
// succeeds: what an operator needs when the agent never becomes ready.
func (a *Agent) LastError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

func (a *Agent) setLastError(err error) {
	a.mu.Lock()
	a.lastErr = err
	a.mu.Unlock()
}

var errDuplicate = errors.New("already connected to this server")

// DefaultLeaseNamespace is upstream's --lease-namespace default.
const DefaultLeaseNamespace = "kube-system"

// New validates opts and opens the health and admin listeners.
func New(opts Options) (*Agent, error) {
	if opts.ServerAddress == "" {
		return nil, errors.New("no proxy server address")
	}
	if opts.AgentID == "" {
		opts.AgentID = randomID()
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = time.Second
	}
	if opts.SyncIntervalCap < opts.SyncInterval {
		opts.SyncIntervalCap = max(opts.SyncInterval, 10*time.Second)
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = time.Second
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if err := validateCountSource(opts.ServerCountSource); err != nil {
		return nil, err
	}
	if opts.CountServerLeases {
		if opts.Kubernetes == nil {
			return nil, errors.New("--count-server-leases needs a Kubernetes client: give --kubeconfig, or run in a pod (in-cluster config)")
		}
		if opts.LeaseNamespace == "" {
			opts.LeaseNamespace = DefaultLeaseNamespace
		}
		if opts.LeaseSelector == nil {
			opts.LeaseSelector = labels.SelectorFromSet(labels.Set{"k8s-app": "konnectivity-server"})
		}
	}
	a := &Agent{opts: opts, reg: opts.Registry, sessions: map[string]*session{}, changed: make(chan struct{}, 1),
		forceStop: make(chan struct{})}
	if a.reg == nil {
		// Upstream's agent serves the default registry: Go and process
		// metrics beside its own.
		a.reg = prometheus.NewRegistry()
		a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		// And promhttp.Handler's own request metrics.
		a.metricsHandler = promhttp.InstrumentMetricHandler(a.reg, promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	} else {
		a.metricsHandler = promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{})
	}
	a.m = newMetrics(a.reg)
	a.m.knownServerCount.Set(1)
	a.logger = klog.Background().WithName("proxy-agent").WithValues("agentID", opts.AgentID)
	if opts.CountServerLeases {
		a.leases = newLeaseCounter(opts.Kubernetes, opts.LeaseNamespace, opts.LeaseSelector, a.m, a.signal)
	}
	var err error
	if opts.HealthAddress != "" {
		if a.healthLn, err = net.Listen("tcp", opts.HealthAddress); err != nil {
			return nil, fmt.Errorf("health listener: %w", err)
		}
	}
	if opts.AdminAddress != "" {
		if a.adminLn, err = net.Listen("tcp", opts.AdminAddress); err != nil {
			if a.healthLn != nil {
				_ = a.healthLn.Close()
			}
			return nil, fmt.Errorf("admin listener: %w", err)
		}
	}
	return a, nil
}

// ID is the agent ID sent to servers.
func (a *Agent) ID() string { return a.opts.AgentID }

// HealthAddr and AdminAddr are nil when disabled.
func (a *Agent) HealthAddr() net.Addr {
	if a.healthLn == nil {
		return nil
	}
	return a.healthLn.Addr()
}

func (a *Agent) AdminAddr() net.Addr {
	if a.adminLn == nil {
		return nil
	}
	return a.adminLn.Addr()
}

// Registry holds the agent's metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// ServerIDs are the servers the agent holds a control stream to.
func (a *Agent) ServerIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.sessions))
	for id := range a.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Ready is true while the agent holds at least one server.
func (a *Agent) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sessions) > 0 && !a.draining
}

// Run connects and serves until ctx is cancelled, then drains.
func (a *Agent) Run(ctx context.Context) error {
	a.logger = klog.FromContext(ctx).WithName("proxy-agent").WithValues("agentID", a.opts.AgentID)
	var servers []*http.Server
	for _, l := range []net.Listener{a.healthLn, a.adminLn} {
		if l == nil {
			continue
		}
		hs := netproxy.NewHTTPServer(a.mux(l == a.adminLn && a.opts.EnableProfiling), nil)
		servers = append(servers, hs)
		go func() { _ = hs.Serve(l) }()
	}
	defer func() {
		for _, hs := range servers {
			_ = hs.Close()
		}
	}()
	a.logger.Info("Proxy agent running", "server", a.opts.ServerAddress, "identifiers", a.opts.AgentIdentifiers,
		"streamsV1", !a.opts.DisableStreams, "countServerLeases", a.leases != nil)
	if a.leases != nil {
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		go a.leases.run(lctx, a.signal)
	}
	a.syncLoop(ctx)
	a.drain()
	return nil
}

// syncLoop keeps as many control streams as servers exist. Every attempt
// is a new TCP connection, so a load balancer can route it to a server the
// agent does not hold yet; duplicates are closed.
func (a *Agent) syncLoop(ctx context.Context) {
	delay := a.opts.SyncInterval
	for ctx.Err() == nil {
		held, want := a.counts()
		if held < want || a.opts.SyncForever {
			err := a.connectOnce(ctx)
			switch {
			case err == nil:
				a.setLastError(nil)
				delay = a.opts.SyncInterval
				if held+1 < want {
					continue
				}
			case errors.Is(err, errDuplicate):
				a.logger.V(4).Info("Reached a server already held", "held", held, "serverCount", want)
				delay = min(delay*2, a.opts.SyncIntervalCap)
			default:
				if ctx.Err() != nil {
					return
				}
				a.setLastError(err)
				a.logger.Info("Connecting to proxy server failed", "server", a.opts.ServerAddress, "err", err, "retryIn", delay)
				delay = min(delay*2, a.opts.SyncIntervalCap)
			}
		}
		wait := delay
		if held, want := a.counts(); held >= want && a.opts.SyncForever {
			wait = a.opts.SyncIntervalCap
		} else if held >= want {
			wait = time.Hour
		}
		// Jitter spreads a fleet of agents reconnecting after a server restart.
		wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.changed:
			t.Stop()
		case <-t.C:
		}
	}
}

// StreamsV1 is how many of the control streams held negotiated streams-v1
// (a stream per connection, the others being upstream's single-stream
// protocol), and how many are held. Both protocols carry bytes correctly,
// so a test of one cannot tell from the traffic alone which one it ran.
func (a *Agent) StreamsV1() (v1, held int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.sessions {
		if s.v1.Load() {
			v1++
		}
	}
	return v1, len(a.sessions)
}

// counts is how many servers the agent holds and how many it should:
// decided again at every look, as upstream's agent does at every sync, so
// a Lease that expired counts no more.
func (a *Agent) counts() (held, want int) {
	in := countInputs{LeasesOn: a.leases != nil, Source: a.opts.ServerCountSource}
	if a.leases != nil {
		in.Leases = a.leases.count(time.Now())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	in.Header = a.headerCount
	want, from := decideServerCount(in)
	if want != a.lastCount {
		a.lastCount = want
		a.m.knownServerCount.Set(float64(want))
		a.logger.V(2).Info("Server count", "serverCount", want, "source", from, "header", in.Header, "leases", in.Leases)
	}
	return len(a.sessions), want
}

func (a *Agent) signal() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

func (a *Agent) addSession(s *session, serverCount int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.sessions[s.serverID]; dup {
		return errDuplicate
	}
	// Only a server newly held updates the header count, as upstream's.
	if serverCount > 0 {
		a.headerCount = serverCount
	}
	a.sessions[s.serverID] = s
	a.m.openServerConns.Set(float64(len(a.sessions)))
	return nil
}

func (a *Agent) removeSession(s *session) {
	a.mu.Lock()
	if a.sessions[s.serverID] == s {
		delete(a.sessions, s.serverID)
	}
	a.m.openServerConns.Set(float64(len(a.sessions)))
	a.mu.Unlock()
	a.signal()
}

// drain tells every server the agent is going away (DRAIN: Portside's
// servers send it no new dials; upstream's still may, and it serves them),
// waits for proxied connections to end, up to DrainTimeout if set or until
// ForceStop, and closes the sessions. Unlike upstream's agent, which waits
// for a second signal whatever is open, it exits as soon as nothing is.
func (a *Agent) drain() {
	a.mu.Lock()
	a.draining = true
	sessions := make([]*session, 0, len(a.sessions))
	for _, s := range a.sessions {
		sessions = append(sessions, s)
	}
	a.mu.Unlock()
	for _, s := range sessions {
		s.sendDrain()
	}
	if n := a.liveConns.Load(); n > 0 {
		a.logger.Info("Draining: waiting for open connections to end (a second signal stops at once)",
			"liveConnections", n, "servers", len(sessions), "drainTimeout", a.opts.DrainTimeout)
	}
	var timeout <-chan time.Time
	if a.opts.DrainTimeout > 0 {
		t := time.NewTimer(a.opts.DrainTimeout)
		defer t.Stop()
		timeout = t.C
	}
	// Polling keeps the per-connection path free of drain bookkeeping.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for a.liveConns.Load() > 0 {
		select {
		case <-tick.C:
		case <-timeout:
			a.logger.Info("Drain timed out; closing remaining connections", "liveConnections", a.liveConns.Load())
			break wait
		case <-a.forceStop:
			a.logger.Info("Second signal; closing remaining connections", "liveConnections", a.liveConns.Load())
			break wait
		}
	}
	for _, s := range sessions {
		s.close()
	}
	for _, s := range sessions {
		<-s.done
	}
	a.logger.Info("Proxy agent stopped")
}

func randomID() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 16)
	for i := range b {
		b[i] = hex[rand.IntN(16)]
	}
	return string(b)
}
