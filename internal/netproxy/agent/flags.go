package agent

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/tlsutil"
)

// Flags are upstream proxy-agent's command-line flags, with their
// defaults; Options turns them into agent Options.
type Flags struct {
	ServerHost                                   string
	ServerPort                                   int
	AgentID, AgentIdentifiers                    string
	CACert, AgentCert, AgentKey                  string
	ALPNProtos                                   []string
	HealthHost                                   string
	HealthPort, AdminPort                        int
	AdminBind                                    string
	SyncInterval, SyncIntervalCap, ProbeInterval time.Duration
	SyncForever                                  bool
	KeepaliveTime                                time.Duration
	ServiceAccountTokenPath                      string
	DrainTimeout                                 time.Duration
	Plaintext                                    bool
	Streams                                      bool
	Link                                         bool
	EnableProfiling                              bool
	CountServerLeases                            bool
	LeaseNamespace                               string
	LeaseSelector                                labels.Selector
	ServerCountSource                            string
	Kubeconfig                                   string
	KubeAPIContentType                           string

	ignored netproxy.IgnoredFlags
}

// ignoredFlags are upstream flags Portside accepts and does not implement.
var ignoredFlags = map[string]string{
	"xfr-channel-size":            "150",
	"warn-on-channel-limit":       "false",
	"enable-contention-profiling": "false",
}

// NewFlags returns upstream's defaults.
func NewFlags() *Flags {
	return &Flags{ServerHost: "127.0.0.1", ServerPort: 8091, AgentID: os.Getenv("PROXY_AGENT_ID"),
		HealthPort: 8093, AdminPort: 8094, AdminBind: "127.0.0.1",
		SyncInterval: time.Second, SyncIntervalCap: 10 * time.Second, ProbeInterval: time.Second,
		KeepaliveTime: time.Hour, Streams: true, Link: true,
		LeaseNamespace: DefaultLeaseNamespace, LeaseSelector: labels.SelectorFromSet(labels.Set{"k8s-app": "konnectivity-server"}),
		ServerCountSource: CountSourceDefault, KubeAPIContentType: runtime.ContentTypeProtobuf}
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.ServerHost, "proxy-server-host", f.ServerHost, "Host of the proxy server(s), often a load balancer.")
	fs.IntVar(&f.ServerPort, "proxy-server-port", f.ServerPort, "Agent port of the proxy server(s).")
	fs.StringVar(&f.AgentID, "agent-id", f.AgentID, "Unique ID of this agent (default $PROXY_AGENT_ID, else random).")
	fs.StringVar(&f.AgentIdentifiers, "agent-identifiers", f.AgentIdentifiers, "URL-encoded identifiers for routing, e.g. host=node1&ipv4=10.0.0.5&cidr=10.0.0.0/24&default-route=true.")
	fs.StringVar(&f.CACert, "ca-cert", f.CACert, "CA the server certificate must chain to; empty uses the system roots.")
	fs.StringVar(&f.AgentCert, "agent-cert", f.AgentCert, "Client certificate for mTLS.")
	fs.StringVar(&f.AgentKey, "agent-key", f.AgentKey, "Client key for mTLS.")
	fs.StringSliceVar(&f.ALPNProtos, "alpn-proto", f.ALPNProtos, "Additional ALPN protocols offered to the server.")
	fs.StringVar(&f.HealthHost, "health-server-host", f.HealthHost, "Address for the health server, without port; empty binds all interfaces.")
	fs.IntVar(&f.HealthPort, "health-server-port", f.HealthPort, "Port for /healthz, /readyz and /metrics.")
	fs.IntVar(&f.AdminPort, "admin-server-port", f.AdminPort, "Port for /metrics and, with --enable-profiling, /debug/pprof.")
	fs.StringVar(&f.AdminBind, "admin-bind-address", f.AdminBind, "Bind address for the admin server.")
	fs.DurationVar(&f.SyncInterval, "sync-interval", f.SyncInterval, "First delay between attempts to reach more servers; doubled after failures.")
	fs.DurationVar(&f.SyncIntervalCap, "sync-interval-cap", f.SyncIntervalCap, "Longest delay between attempts to reach more servers.")
	fs.DurationVar(&f.ProbeInterval, "probe-interval", f.ProbeInterval, "How often the health of each server connection is checked.")
	fs.BoolVar(&f.SyncForever, "sync-forever", f.SyncForever, "Keep looking for servers after --server-count are held.")
	fs.DurationVar(&f.KeepaliveTime, "keepalive-time", f.KeepaliveTime, "gRPC keepalive time to the server.")
	fs.StringVar(&f.ServiceAccountTokenPath, "service-account-token-path", f.ServiceAccountTokenPath, "File holding a ServiceAccount token to authenticate with.")
	fs.DurationVar(&f.DrainTimeout, "drain-timeout", f.DrainTimeout, "On SIGTERM, how long open connections may continue after the servers were told to drain; 0 waits until they end or a second signal.")
	fs.BoolVar(&f.Plaintext, "portside-plaintext", f.Plaintext, "Connect without TLS (tests, or a TLS-terminating sidecar).")
	fs.BoolVar(&f.Link, "portside-link", f.Link, "Offer TLS servers portside-link/2 (connections as frames on one TLS connection, flow-controlled each); servers that do not choose it get gRPC.")
	fs.BoolVar(&f.Streams, "portside-streams", f.Streams, "Offer Portside servers one stream per connection (no head-of-line blocking).")
	fs.BoolVar(&f.EnableProfiling, "enable-profiling", f.EnableProfiling, "Serve /debug/pprof on the admin port.")
	fs.BoolVar(&f.CountServerLeases, "count-server-leases", f.CountServerLeases, "Count the proxy servers' valid Leases to know how many servers to connect to.")
	fs.StringVar(&f.LeaseNamespace, "lease-namespace", f.LeaseNamespace, "Namespace of the proxy servers' Leases.")
	fs.Var(selectorFlag{&f.LeaseSelector}, "lease-label-selector", "Label selector of the proxy servers' Leases to count.")
	fs.Var(selectorFlag{&f.LeaseSelector}, "lease-label", "Label selector of the proxy servers' Leases to count.")
	_ = fs.MarkDeprecated("lease-label", "use --lease-label-selector instead")
	fs.StringVar(&f.ServerCountSource, "server-count-source", f.ServerCountSource, "How the server count from Leases and from the servers' responses combine: 'default' (the Lease count with --count-server-leases, else the servers'), 'max' (the larger).")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "Kubeconfig for listing Leases; empty uses the in-cluster config.")
	fs.StringVar(&f.KubeAPIContentType, "kube-api-content-type", f.KubeAPIContentType, "Content type of requests sent to the apiserver.")
	f.ignored = netproxy.RegisterIgnored(fs, ignoredFlags, "proxy-agent")
}

// Options builds agent Options; it logs the upstream flags that were set
// but are ignored.
func (f *Flags) Options(fs *pflag.FlagSet, logger logr.Logger) (Options, error) {
	f.ignored.LogSet(fs, logger)
	o := Options{ServerAddress: net.JoinHostPort(f.ServerHost, strconv.Itoa(f.ServerPort)),
		AgentID: f.AgentID, AgentIdentifiers: f.AgentIdentifiers,
		SyncInterval: f.SyncInterval, SyncIntervalCap: f.SyncIntervalCap, ProbeInterval: f.ProbeInterval,
		SyncForever: f.SyncForever, KeepaliveTime: f.KeepaliveTime, ServiceAccountTokenPath: f.ServiceAccountTokenPath,
		DrainTimeout: f.DrainTimeout, DisableStreams: !f.Streams, DisableLink: !f.Link, EnableProfiling: f.EnableProfiling,
		CountServerLeases: f.CountServerLeases, LeaseNamespace: f.LeaseNamespace, LeaseSelector: f.LeaseSelector,
		ServerCountSource: f.ServerCountSource}
	if err := validateCountSource(f.ServerCountSource); err != nil {
		return Options{}, err
	}
	if f.CountServerLeases {
		var err error
		if o.Kubernetes, err = kubeClient(f.Kubeconfig, f.KubeAPIContentType); err != nil {
			return Options{}, err
		}
	}
	if f.HealthPort > 0 {
		o.HealthAddress = net.JoinHostPort(f.HealthHost, strconv.Itoa(f.HealthPort))
	}
	if f.AdminPort > 0 {
		o.AdminAddress = net.JoinHostPort(f.AdminBind, strconv.Itoa(f.AdminPort))
	}
	if !f.Plaintext {
		var err error
		if o.TLS, err = tlsutil.Client(f.CACert, f.AgentCert, f.AgentKey, f.ServerHost, f.ALPNProtos); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

// kubeClient is the agent's client for Leases: from kubeconfig, else the
// pod's in-cluster config, as upstream's agent.
func kubeClient(kubeconfig, contentType string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("--count-server-leases without --kubeconfig needs the in-cluster config: %w", err)
	}
	cfg.ContentType = contentType
	cfg.UserAgent = "portside-proxy-agent"
	return kubernetes.NewForConfig(cfg)
}

// selectorFlag is a label selector flag (upstream's --lease-label-selector
// takes any selector, not only key=value pairs).
type selectorFlag struct{ s *labels.Selector }

func (f selectorFlag) Type() string { return "string" }

func (f selectorFlag) String() string {
	if f.s == nil || *f.s == nil {
		return ""
	}
	return (*f.s).String()
}

func (f selectorFlag) Set(v string) error {
	sel, err := labels.Parse(v)
	if err != nil {
		return fmt.Errorf("want a label selector such as k8s-app=konnectivity-server: %w", err)
	}
	*f.s = sel
	return nil
}
