package server

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/tlsutil"
)

// Flags are upstream proxy-server's command-line flags, with their
// defaults; Options turns them into server Options.
type Flags struct {
	Mode, UDSName                                     string
	DeleteUDSFile                                     bool
	ServerPort, AgentPort, HealthPort, AdminPort      int
	ServerBind, AgentBind, HealthBind, AdminBind      string
	ServerCert, ServerKey, ServerCACert               string
	ClusterCert, ClusterKey, ClusterCACert            string
	CipherSuites                                      []string
	KeepaliveTime, FrontendKeepaliveTime              time.Duration
	ServerID                                          string
	ServerCount                                       int
	ProxyStrategies                                   string
	AgentNamespace, AgentServiceAccount, AuthAudience string
	AllowRouteClaims                                  []string
	AllowCertificateAgents                            bool
	Kubeconfig                                        string
	KubeconfigQPS                                     float32
	KubeconfigBurst                                   int
	BackendDialTimeout, GracefulShutdownTimeout       time.Duration
	EnableProfiling                                   bool
	Streams                                           bool
	Link                                              bool

	// Flood resistance of the agent port (reviewcache.go, admission.go).
	ReviewMaxInFlight                        int
	ReviewTimeout, ReviewCacheTTL            time.Duration
	ReviewDenialTTL                          time.Duration
	ReviewQPS                                float32
	ReviewBurst                              int
	MaxStreamsPerConnection, MaxUnauthStream int

	EnableLeaseController bool
	LeaseNamespace        string
	LeaseLabel            string

	// TLS and the insecure set-ups checkSecurity refuses (insecure.go).
	TLSMinVersion                         string
	InsecureServerPort, InsecureAgentPort bool

	ignored netproxy.IgnoredFlags
}

// ignoredFlags are upstream flags Portside accepts and does not implement:
// a drop-in replacement must not fail on a manifest written for upstream.
var ignoredFlags = map[string]string{
	"xfr-channel-size":            "10",
	"kube-api-content-type":       "application/vnd.kubernetes.protobuf",
	"enable-contention-profiling": "false",
	"warn-on-channel-limit":       "true",
}

// NewFlags returns upstream's defaults.
func NewFlags() *Flags {
	return &Flags{Mode: ModeGRPC, DeleteUDSFile: true, ServerPort: 8090, AgentPort: 8091, HealthPort: 8092,
		AdminPort: 8095, AdminBind: "127.0.0.1", KeepaliveTime: time.Hour, FrontendKeepaliveTime: time.Hour,
		ServerID: os.Getenv("PROXY_SERVER_ID"), ServerCount: 1, ProxyStrategies: "default",
		GracefulShutdownTimeout: 15 * time.Second, Streams: true, Link: true, LeaseNamespace: "kube-system", LeaseLabel: "k8s-app=konnectivity-server",
		ReviewMaxInFlight: DefaultReviewMaxInFlight, ReviewTimeout: DefaultReviewTimeout, ReviewCacheTTL: DefaultReviewCacheTTL,
		ReviewDenialTTL: DefaultReviewDenialTTL, ReviewQPS: DefaultReviewQPS, ReviewBurst: DefaultReviewBurst,
		MaxStreamsPerConnection: DefaultMaxStreamsPerConnection, MaxUnauthStream: DefaultMaxUnauthenticatedStreamsPerPeer,
	}
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Mode, "mode", f.Mode, "Frontend protocol: 'grpc' or 'http-connect'.")
	fs.StringVar(&f.UDSName, "uds-name", f.UDSName, "Unix socket for the frontend; empty serves the frontend on TCP --server-port.")
	fs.BoolVar(&f.DeleteUDSFile, "delete-existing-uds-file", f.DeleteUDSFile, "Delete an existing --uds-name file before listening.")
	fs.IntVar(&f.ServerPort, "server-port", f.ServerPort, "Port for frontend (kube-apiserver) connections; ignored with --uds-name.")
	fs.StringVar(&f.ServerBind, "server-bind-address", f.ServerBind, "Bind address for frontend connections; empty binds all interfaces.")
	fs.IntVar(&f.AgentPort, "agent-port", f.AgentPort, "Port for agent connections.")
	fs.StringVar(&f.AgentBind, "agent-bind-address", f.AgentBind, "Bind address for agent connections; empty binds all interfaces.")
	fs.IntVar(&f.HealthPort, "health-port", f.HealthPort, "Port for /healthz, /readyz and /metrics.")
	fs.StringVar(&f.HealthBind, "health-bind-address", f.HealthBind, "Bind address for health connections; empty binds all interfaces.")
	fs.IntVar(&f.AdminPort, "admin-port", f.AdminPort, "Port for /metrics and, with --enable-profiling, /debug/pprof.")
	fs.StringVar(&f.AdminBind, "admin-bind-address", f.AdminBind, "Bind address for admin connections.")
	fs.StringVar(&f.ServerCert, "server-cert", f.ServerCert, "Frontend serving certificate; empty serves the TCP frontend in plaintext.")
	fs.StringVar(&f.ServerKey, "server-key", f.ServerKey, "Frontend serving key.")
	fs.StringVar(&f.ServerCACert, "server-ca-cert", f.ServerCACert, "CA that frontend (kube-apiserver) client certificates must chain to.")
	fs.StringVar(&f.ClusterCert, "cluster-cert", f.ClusterCert, "Agent-facing serving certificate; empty serves agents in plaintext.")
	fs.StringVar(&f.ClusterKey, "cluster-key", f.ClusterKey, "Agent-facing serving key.")
	fs.StringVar(&f.ClusterCACert, "cluster-ca-cert", f.ClusterCACert, "CA that agent client certificates must chain to.")
	fs.StringSliceVar(&f.CipherSuites, "cipher-suites", f.CipherSuites, "Allowed TLS 1.2 cipher suites (Go's names of secure suites, as upstream); empty uses Go's defaults. Insecure suites are refused.")
	fs.StringVar(&f.TLSMinVersion, "tls-min-version", f.TLSMinVersion, "Minimum TLS version: VersionTLS12 (empty) or VersionTLS13; lower versions are refused.")
	fs.BoolVar(&f.InsecureServerPort, flagInsecureServerPort, f.InsecureServerPort, "Allow a TCP frontend without TLS or without client certificates (--server-cert, --server-key, --server-ca-cert), or an abstract --uds-name: anyone who reaches it can dial into the cluster network.")
	fs.BoolVar(&f.InsecureAgentPort, flagInsecureAgentPort, f.InsecureAgentPort, "Allow an agent port without TLS (--cluster-cert, --cluster-key) or without agent authentication (--cluster-ca-cert or ServiceAccount tokens).")
	fs.DurationVar(&f.KeepaliveTime, "keepalive-time", f.KeepaliveTime, "gRPC keepalive time on agent connections.")
	fs.DurationVar(&f.FrontendKeepaliveTime, "frontend-keepalive-time", f.FrontendKeepaliveTime, "gRPC keepalive time on frontend connections.")
	fs.StringVar(&f.ServerID, "server-id", f.ServerID, "Unique ID of this server (default $PROXY_SERVER_ID, else random).")
	fs.IntVar(&f.ServerCount, "server-count", f.ServerCount, "Number of proxy server instances agents should connect to (with --enable-lease-controller, at least this many).")
	fs.BoolVar(&f.EnableLeaseController, "enable-lease-controller", f.EnableLeaseController, "Publish this server's Lease, delete expired ones of other servers, and tell agents the number of live servers.")
	fs.StringVar(&f.LeaseNamespace, "lease-namespace", f.LeaseNamespace, "Namespace of the proxy servers' Leases.")
	fs.StringVar(&f.LeaseLabel, "lease-label", f.LeaseLabel, "Labels (key=value[,key=value]) of the proxy servers' Leases.")
	fs.StringVar(&f.ProxyStrategies, "proxy-strategies", f.ProxyStrategies, "Comma-ordered agent selection strategies: destHost, defaultRoute, default, and Portside's portsideDestCIDR (agents whose cidr= identifiers hold the destination address).")
	fs.StringVar(&f.AgentNamespace, "agent-namespace", f.AgentNamespace, "Namespace of the agents' ServiceAccount (token authentication).")
	fs.StringVar(&f.AgentServiceAccount, "agent-service-account", f.AgentServiceAccount, "Agents' ServiceAccount name (token authentication).")
	fs.StringVar(&f.AuthAudience, "authentication-audience", f.AuthAudience, "Audience the agents' tokens must carry; required with token authentication.")
	fs.BoolVar(&f.AllowCertificateAgents, "allow-certificate-agents", f.AllowCertificateAgents, "With token authentication (--agent-namespace, ...) and --cluster-ca-cert: also accept an agent that sends no token but a client certificate chaining to --cluster-ca-cert, which then names it (as without token authentication). Portside's; without it, as upstream, such a server asks every agent for both a certificate and a token, and the token names it.")
	fs.StringSliceVar(&f.AllowRouteClaims, "allow-route-claims", f.AllowRouteClaims, "Users or groups (a token's ServiceAccount user, a certificate's CommonName or Organization, or system:node:<name>) whose agents may claim cidr, default-route and addresses other than their own Node's. Others may claim only their Node's name and addresses.")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "Kubeconfig for TokenReviews, Nodes and Leases; empty uses the in-cluster config.")
	fs.Float32Var(&f.KubeconfigQPS, "kubeconfig-qps", f.KubeconfigQPS, "Client QPS for reading Nodes and Leases (TokenReviews have their own: --token-review-qps).")
	fs.IntVar(&f.KubeconfigBurst, "kubeconfig-burst", f.KubeconfigBurst, "Client burst for reading Nodes and Leases (TokenReviews: --token-review-burst).")
	fs.IntVar(&f.ReviewMaxInFlight, "token-review-max-in-flight", f.ReviewMaxInFlight, "Most agent TokenReviews in flight at once; an agent stream whose token needs one beyond it is refused (Unavailable; agents retry). Streams with the same token share one review.")
	fs.DurationVar(&f.ReviewTimeout, "token-review-timeout", f.ReviewTimeout, "Timeout of one agent TokenReview.")
	fs.DurationVar(&f.ReviewCacheTTL, "token-review-cache-ttl", f.ReviewCacheTTL, "How long a successful TokenReview answers the same token again (never past the token's expiry); negative disables.")
	fs.DurationVar(&f.ReviewDenialTTL, "token-review-denial-ttl", f.ReviewDenialTTL, "How long a denied token is refused without a new TokenReview; negative disables.")
	fs.Float32Var(&f.ReviewQPS, "token-review-qps", f.ReviewQPS, "QPS of the TokenReview client, apart from the client for Nodes and Leases (--kubeconfig-qps).")
	fs.IntVar(&f.ReviewBurst, "token-review-burst", f.ReviewBurst, "Burst of the TokenReview client.")
	fs.IntVar(&f.MaxStreamsPerConnection, "max-agent-streams-per-connection", f.MaxStreamsPerConnection, "Most agent control streams on one connection (an agent needs one); more are refused with ResourceExhausted. Negative: no cap.")
	fs.IntVar(&f.MaxUnauthStream, "max-unauthenticated-streams-per-peer", f.MaxUnauthStream, "Most agent streams from one source address still being authenticated; more are refused with ResourceExhausted. Raise it when agents reach the server through a load balancer that does not preserve their address. Negative: no cap.")
	fs.DurationVar(&f.BackendDialTimeout, "backend-dial-timeout", f.BackendDialTimeout, "Fail a dial the agent has not answered within this time; 0 waits.")
	fs.DurationVar(&f.GracefulShutdownTimeout, "graceful-shutdown-timeout", f.GracefulShutdownTimeout, "On SIGTERM, how long open tunnels may continue before they are closed.")
	fs.BoolVar(&f.EnableProfiling, "enable-profiling", f.EnableProfiling, "Serve /debug/pprof on the admin port.")
	fs.BoolVar(&f.Link, "portside-link", f.Link, "Offer Portside agents portside-link/2 on the TLS agent port (chosen by ALPN; upstream agents get gRPC as before).")
	fs.BoolVar(&f.Streams, "portside-streams", f.Streams, "Offer Portside agents one stream per connection (no head-of-line blocking); upstream agents are unaffected.")
	f.ignored = netproxy.RegisterIgnored(fs, ignoredFlags, "proxy-server")
}

// Options builds server Options, loading certificates and the TokenReview
// client; it logs the upstream flags that were set but are ignored.
func (f *Flags) Options(fs *pflag.FlagSet, logger logr.Logger) (Options, error) {
	f.ignored.LogSet(fs, logger)
	if err := checkSecurity(f); err != nil {
		return Options{}, err
	}
	strategies, err := ParseStrategies(f.ProxyStrategies)
	if err != nil {
		return Options{}, err
	}
	o := Options{Mode: f.Mode, UDSName: f.UDSName, DeleteUDSFile: f.DeleteUDSFile,
		FrontendAddress: hostPort(f.ServerBind, f.ServerPort), AgentAddress: hostPort(f.AgentBind, f.AgentPort),
		ServerID: f.ServerID, ServerCount: f.ServerCount, Strategies: strategies,
		BackendDialTimeout: f.BackendDialTimeout, GracefulShutdownTimeout: f.GracefulShutdownTimeout,
		KeepaliveTime: f.KeepaliveTime, FrontendKeepaliveTime: f.FrontendKeepaliveTime, DisableStreams: !f.Streams, DisableLink: !f.Link,
		EnableProfiling: f.EnableProfiling,
		StreamLimits:    f.streamLimits()}
	if f.HealthPort > 0 {
		o.HealthAddress = hostPort(f.HealthBind, f.HealthPort)
	}
	if f.AdminPort > 0 {
		o.AdminAddress = hostPort(f.AdminBind, f.AdminPort)
	}
	if f.UDSName == "" {
		if f.ServerCert != "" {
			if o.FrontendTLS, err = tlsutil.Server(f.ServerCert, f.ServerKey, f.ServerCACert, f.CipherSuites, f.TLSMinVersion); err != nil {
				return Options{}, err
			}
			// kube-apiserver's HTTP-CONNECT egress handshakes once per
			// dial with the same client certificate: its chain's verdict
			// is kept (the frontend reads no identity from the chain).
			tlsutil.CacheClientVerification(o.FrontendTLS)
		} else {
			logger.Info("Warning: no --server-cert: the TCP frontend is plaintext (--" + flagInsecureServerPort + ")")
		}
	}
	if f.ClusterCert != "" {
		if o.AgentTLS, err = tlsutil.Server(f.ClusterCert, f.ClusterKey, f.ClusterCACert, f.CipherSuites, f.TLSMinVersion); err != nil {
			return Options{}, err
		}
	} else {
		logger.Info("Warning: no --cluster-cert: the agent port is plaintext (--" + flagInsecureAgentPort + ")")
	}
	if err := f.identityOptions(&o, logger); err != nil {
		return Options{}, err
	}
	if f.AllowCertificateAgents {
		if o.TokenAuth == nil || f.ClusterCACert == "" || o.AgentTLS == nil {
			return Options{}, errors.New("--allow-certificate-agents accepts certificate agents beside token-authenticated ones: it needs token authentication (--agent-namespace, --agent-service-account, --authentication-audience) and --cluster-cert, --cluster-key and --cluster-ca-cert")
		}
		// A client certificate is asked for, not required: a token agent
		// has none, and authenticate decides by what the agent sent.
		o.AgentTLS.ClientAuth = tls.VerifyClientCertIfGiven
		o.CertificateAgents = true
	}
	if f.EnableLeaseController {
		if o.ServerID == "" {
			// As upstream: a random ID; the Lease of an earlier run expires
			// and is collected.
			o.ServerID = newSession()[:16]
		}
		cs, err := f.kubeClient()
		if err != nil {
			return Options{}, err
		}
		if o.Leases, err = NewLeasePublisher(cs, f.LeaseNamespace, f.LeaseLabel, o.ServerID, f.ServerCount); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

func (f *Flags) kubeClient() (kubernetes.Interface, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (f *Flags) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if f.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", f.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	if f.KubeconfigQPS > 0 {
		cfg.QPS = f.KubeconfigQPS
	}
	if f.KubeconfigBurst > 0 {
		cfg.Burst = f.KubeconfigBurst
	}
	return cfg, nil
}

func (f *Flags) streamLimits() StreamLimits {
	return StreamLimits{PerConnection: f.MaxStreamsPerConnection, PerUnauthenticatedPeer: f.MaxUnauthStream}
}

// reviewConfig is the TokenReview client's: a copy with its own rate
// limiter, so a flood of agent streams cannot starve the Node watch and
// Lease updates, nor they the reviews of real agents.
func (f *Flags) reviewConfig() (*rest.Config, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = nil
	cfg.QPS, cfg.Burst = f.ReviewQPS, f.ReviewBurst
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultReviewQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultReviewBurst
	}
	return cfg, nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
