// Package server is the local cloud's HTTP/JSON API (version v1): bearer
// token auth, validation that answers bad input with a 4xx naming what is
// wrong, fault injection, and the glue between the durable store and the
// load-balancer data plane.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/localcloud/console"
	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/hypervisor"
	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Options configure the cloud.
type Options struct {
	// Token is the bearer token every request must carry. Required.
	Token string
	// Regions and their zones; default region-1 with zone-a, zone-b, zone-c.
	Regions []api.Region
	// InstanceTypes offered; default small, medium, large.
	InstanceTypes []api.InstanceType
	// NodePoolV4 and NodePoolV6 give instance addresses. The IPv4 default,
	// 127.1.0.0/16, is on loopback so simulated nodes can listen on it.
	NodePoolV4, NodePoolV6 netip.Prefix
	// VIPPoolV4 and VIPPoolV6 give load-balancer VIPs; default 127.100.0.0/16
	// and none (IPv6 VIPs need addresses routed to lo).
	VIPPoolV4, VIPPoolV6 netip.Prefix
	// CredentialTTL is the lifetime of registry credentials; default 1h.
	CredentialTTL time.Duration
	// DataPlane tunes the load balancers.
	DataPlane dataplane.Options
	// Limits bound what clients may create; nil: DefaultLimits.
	Limits *Limits
	// ViewerToken logs in to the web console read-only ("" for none).
	ViewerToken string
	// ScopedTokens are API tokens limited to the operations their scopes
	// name (see AllScopes); the admin Token may do everything.
	ScopedTokens []ScopedToken
	// ConsoleKubeconfig, when set, makes the console show the cluster side
	// (it waits for the file to exist).
	ConsoleKubeconfig string
	// RegistryPublicPrefixes are the served registry's public repositories
	// (registry.Options.PublicPrefixes).
	RegistryPublicPrefixes []string
	// Machines, when set, runs instances created with user data as real
	// machines in the cloud's VPC (see package hypervisor).
	Machines *hypervisor.Options
	// NoLBKernelPath keeps every flow of the proxied load balancers in the
	// data plane's proxy, off the VPC router's kernel path (with Machines).
	NoLBKernelPath bool
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	if len(o.Regions) == 0 {
		o.Regions = []api.Region{{Name: "region-1", Zones: []string{"zone-a", "zone-b", "zone-c"}}}
	}
	if len(o.InstanceTypes) == 0 {
		o.InstanceTypes = []api.InstanceType{
			{Name: "small", CPUs: 2, MemoryMB: 4096},
			{Name: "medium", CPUs: 4, MemoryMB: 16384},
			{Name: "large", CPUs: 16, MemoryMB: 65536},
		}
	}
	if !o.NodePoolV4.IsValid() {
		o.NodePoolV4 = netip.MustParsePrefix("127.1.0.0/16")
	}
	if !o.NodePoolV6.IsValid() {
		o.NodePoolV6 = netip.MustParsePrefix("fd00:1::/64")
	}
	if !o.VIPPoolV4.IsValid() {
		o.VIPPoolV4 = netip.MustParsePrefix("127.100.0.0/16")
	}
	if o.CredentialTTL == 0 {
		o.CredentialTTL = time.Hour
	}
}

// Server is a running local cloud.
type Server struct {
	opts   Options
	store  *store.Store
	plane  *dataplane.Plane
	secret []byte // signs registry credentials
	dir    string // the state file's directory
	logger klog.Logger
	// tokens are the admin, viewer and scoped tokens in force (Options'
	// at start, SetTokens' after a rotation); tokensMu orders rotations.
	tokens   atomic.Pointer[tokenSet]
	tokensMu sync.Mutex

	registry     *registry.Registry // the served registry, once ServeRegistry is called
	registryHost string

	faultsMu sync.RWMutex
	faults   api.Faults

	callsMu sync.Mutex
	calls   map[string]int64 // "METHOD /v1/<resource>" → count
	callLog callLog

	console     *console.Console
	stopConsole context.CancelFunc

	// hv runs real machines (Options.Machines); nil when none.
	hv *hypervisor.Hypervisor
}

// New opens the state in statePath, restores every load balancer into the
// data plane, and returns the server. Close releases both.
func New(ctx context.Context, statePath string, opts Options) (*Server, error) {
	opts.Defaults()
	tokens, err := compileTokens(opts.Token, opts.ViewerToken, opts.ScopedTokens)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(statePath)
	if err != nil {
		return nil, err
	}
	// Real machines: the VPC first, so the data plane serves the VIPs in
	// its router namespace, reached from the host and the machines alike.
	var hv *hypervisor.Hypervisor
	if opts.Machines != nil {
		if hv, err = hypervisor.Start(ctx, *opts.Machines); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("real machines: %w", err)
		}
		router := hv.Network().RouterNetns()
		opts.DataPlane.Listen = func(network, addr string) (net.Listener, error) { return vpc.ListenIn(router, network, addr) }
		opts.DataPlane.ListenPacket = func(network, addr string) (net.PacketConn, error) {
			return vpc.ListenPacketIn(router, network, addr)
		}
		opts.DataPlane.Router = vipRouter{hv.Network()}
		if !opts.NoLBKernelPath {
			opts.DataPlane.Forwarder = vipForwarder{hv.Network()}
		}
	}
	s := &Server{opts: opts, store: st, plane: dataplane.New(ctx, opts.DataPlane), calls: map[string]int64{},
		dir: filepath.Dir(statePath), logger: klog.FromContext(ctx), hv: hv}
	s.tokens.Store(tokens)
	if err := s.loadSecret(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.reindexRoutes(); err != nil {
		s.Close()
		return nil, fmt.Errorf("rebuild route index: %w", err)
	}
	if err := s.restorePower(); err != nil {
		s.Close()
		return nil, fmt.Errorf("restore stopped instances: %w", err)
	}
	if err := s.restore(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.startMachines(ctx); err != nil {
		s.Close()
		return nil, err
	}
	// The session key comes from the stored secret: consoles stay logged
	// in across restarts.
	consoleCtx, stop := context.WithCancel(ctx)
	s.stopConsole = stop
	s.console = console.New(consoleCtx, console.Options{Cloud: s, WriteToken: opts.Token, ViewerToken: opts.ViewerToken,
		SessionKey: s.secret, Kubeconfig: opts.ConsoleKubeconfig})
	return s, nil
}

// Close stops the data plane and closes the served registry and the state.
func (s *Server) Close() {
	if s.stopConsole != nil {
		s.stopConsole()
	}
	s.closeMachines()
	s.plane.Close()
	if s.registry != nil {
		_ = s.registry.Close()
	}
	_ = s.store.Close()
}

// restore starts every stored load balancer again after a restart.
func (s *Server) restore(ctx context.Context) error {
	var lbs []api.LoadBalancer
	if err := s.store.View(func(tx *store.Tx) (err error) {
		lbs, err = listLBs(tx)
		return err
	}); err != nil {
		return err
	}
	for _, lb := range lbs {
		if err := s.plane.Apply(dataplaneConfig(&lb)); err != nil {
			klog.FromContext(ctx).Error(err, "Load balancer not fully restored", "loadBalancer", lb.Name)
		}
	}
	klog.FromContext(ctx).Info("State restored", "loadBalancers", len(lbs))
	return nil
}

func (s *Server) loadSecret() error {
	return s.store.Update(func(tx *store.Tx) error {
		cur, ok, err := store.Get[string](tx, store.Meta, "credential-secret")
		if err != nil {
			return err
		}
		if ok {
			s.secret, err = hex.DecodeString(cur)
			return err
		}
		s.secret = make([]byte, 32)
		if _, err := rand.Read(s.secret); err != nil {
			return err
		}
		return tx.Put(store.Meta, "credential-secret", hex.EncodeToString(s.secret))
	})
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("/console/", s.recoverPanics(s.console.Handler()))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/console/", http.StatusSeeOther) })

	v1 := http.NewServeMux()
	for _, rt := range s.v1Routes() {
		v1.HandleFunc(rt.pattern, rt.handler)
	}
	mux.Handle("/v1/", s.logCalls(s.recoverPanics(s.authenticate(v1, s.countCalls(s.injectFaults(v1))))))
	return mux
}

// route is one v1 API endpoint.
type route struct {
	pattern string
	handler http.HandlerFunc
}

// v1Routes lists the API's endpoints: Handler registers exactly these, and
// TestEveryRouteHasAScope checks each has a scope in routeScopes.
func (s *Server) v1Routes() []route {
	return []route{
		{"GET /v1/regions", s.listRegions},
		{"GET /v1/instance-types", s.listInstanceTypes},
		{"GET /v1/instances", s.listInstances},
		{"POST /v1/instances", s.createInstance},
		{"GET /v1/instances/{id}", s.getInstance},
		{"DELETE /v1/instances/{id}", s.releasePower(s.deleteInstance)},
		{"POST /v1/instances/{id}/stop", s.syncPower(s.setInstanceState(api.InstanceStopped))},
		{"POST /v1/instances/{id}/start", s.syncPower(s.setInstanceState(api.InstanceRunning))},
		{"GET /v1/load-balancers", s.listLoadBalancers},
		{"GET /v1/load-balancers/{name}", s.getLoadBalancer},
		{"PUT /v1/load-balancers/{name}", s.putLoadBalancer},
		{"PUT /v1/load-balancers/{name}/backends", s.putBackends},
		{"PATCH /v1/load-balancers/{name}/backends", s.changeBackends},
		{"GET /v1/load-balancers/{name}/health", s.getLoadBalancerHealth},
		{"DELETE /v1/load-balancers/{name}", s.deleteLoadBalancer},
		{"GET /v1/routes", s.listRoutes},
		{"POST /v1/routes", s.createRoute},
		{"DELETE /v1/routes/{name}", s.deleteRoute},
		{"GET /v1/volumes", s.listVolumes},
		{"POST /v1/volumes", s.createVolume},
		{"GET /v1/volumes/{id}", s.getVolume},
		{"DELETE /v1/volumes/{id}", s.deleteVolume},
		{"GET /v1/registries", s.listRegistries},
		{"POST /v1/registries", s.createRegistry},
		{"DELETE /v1/registries/{host}", s.deleteRegistry},
		{"POST /v1/credentials", s.issueCredential},
		{"GET /v1/token-issuers", s.listTokenIssuers},
		{"POST /v1/token-issuers", s.putTokenIssuer},
		{"DELETE /v1/token-issuers", s.deleteTokenIssuer},
		{"GET /v1/faults", s.getFaults},
		{"PUT /v1/faults", s.putFaults},
		{"POST /v1/console/tickets", s.createConsoleTicket},
		{"/v1/", func(w http.ResponseWriter, r *http.Request) {
			// Not NotFound: clients read that as "the resource is gone".
			writeError(w, http.StatusNotFound, api.CodeNoSuchEndpoint, fmt.Sprintf("no API endpoint %s %s", r.Method, r.URL.Path))
		}},
	}
}
