// Package manager is Portside's cloud controller manager: options with
// upstream flag names, client and provider set-up, leader election on a
// Lease, secure serving of health and metrics, and the registry of
// controllers it runs.
package manager

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
)

// Options are the CCM's settings. Names and defaults follow upstream's
// cloud-controller-manager where upstream has the flag; where Portside's
// default differs it says why (docs/ccm.md).
type Options struct {
	CloudProvider string
	CloudConfig   string
	Kubeconfig    string
	Controllers   []string
	ClusterName   string

	// KubeAPIQPS and KubeAPIBurst: upstream's 20/30 throttle a CCM of a
	// large cluster for minutes; the apiserver's priority and fairness is
	// the real protection, so Portside defaults to 200/400.
	KubeAPIQPS   float32
	KubeAPIBurst int

	// ConcurrentNodeSyncs: upstream defaults to 1 worker; Portside to 16
	// (cloud rate limits are honoured through retry-after, per node).
	ConcurrentNodeSyncs int
	// ConcurrentServiceSyncs: upstream defaults to 1; Portside to 64, so a
	// node change reaches a thousand load balancers in about a second. A
	// worker mostly waits for the cloud (a load-balancer write costs the
	// cloud's latency, not CPU), so a node change takes about
	// load balancers × call latency / workers; with 16 workers both the
	// CCM and the cloud used under a third of a core (docs/benchmarks.md,
	// issue 19). Cloud throttling is honoured per Service (Retry-After).
	ConcurrentServiceSyncs int
	// LoadBalancerClass, when set, makes Portside serve only Services of
	// that loadBalancerClass, to run beside another implementation.
	LoadBalancerClass         string
	NodeMonitorPeriod         time.Duration
	NodeStatusUpdateFrequency time.Duration

	NetworkOptions
	// WebhookOptions: --webhooks, --webhook-* and --pv-label-on-provider-error.
	WebhookOptions

	LeaderElect             bool
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	LeaderElectLockName     string
	LeaderElectNamespace    string
	LeaderElectResourceLock string
	// Identity of this replica in the Lease; default hostname_uuid.
	LeaderElectIdentity string
	// EnableLeaderMigration and LeaderMigrationConfig: hand controllers
	// over from kube-controller-manager under a shared migration lease.
	EnableLeaderMigration bool
	LeaderMigrationConfig string

	BindAddress string
	SecurePort  int
	// AlwaysAllowPaths are served without authentication; every other path
	// (/metrics) needs a token allowed by the apiserver (delegated auth).
	AlwaysAllowPaths []string
	CertFile         string
	KeyFile          string
	// TLSMinVersion and TLSCipherSuites restrict the serving TLS (upstream's
	// names: VersionTLS12, VersionTLS13; Go's IANA suite names).
	TLSMinVersion   string
	TLSCipherSuites []string

	// UseServiceAccountCredentials: each controller writes with a client
	// of its own ServiceAccount in kube-system (upstream's names), not with
	// the CCM's credentials.
	UseServiceAccountCredentials bool

	// compat holds the upstream flags Portside accepts without
	// implementing them (compatflags.go).
	compat *compatFlags
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Controllers:               []string{"*"},
		ClusterName:               "kubernetes",
		KubeAPIQPS:                200,
		KubeAPIBurst:              400,
		ConcurrentNodeSyncs:       16,
		ConcurrentServiceSyncs:    64,
		NodeMonitorPeriod:         5 * time.Second,
		NodeStatusUpdateFrequency: 5 * time.Minute,
		LeaderElect:               true,
		LeaseDuration:             15 * time.Second,
		RenewDeadline:             10 * time.Second,
		RetryPeriod:               2 * time.Second,
		LeaderElectLockName:       "cloud-controller-manager",
		LeaderElectNamespace:      "kube-system",
		LeaderElectResourceLock:   "leases",
		BindAddress:               "0.0.0.0",
		SecurePort:                10258,
		AlwaysAllowPaths:          []string{"/healthz", "/readyz", "/livez"},
		NetworkOptions:            defaultNetworkOptions(),
		WebhookOptions:            NewWebhookOptions(),
	}
}

// AddFlags registers the flags, with upstream names. Every other flag of
// upstream's cloud-controller-manager is registered too, hidden, so that
// upstream's manifests parse; IgnoredFlags says which of those were set.
// As upstream, '_' in a flag name is read as '-'.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	fs.StringVar(&o.CloudProvider, "cloud-provider", o.CloudProvider, "the provider to run against (one of the registered providers listed above)")
	fs.StringVar(&o.CloudConfig, "cloud-config", o.CloudConfig, "the provider's configuration file")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster (default: in-cluster configuration)")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "controllers to run: '*' for all on by default, 'name' to enable, '-name' to disable")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "the cluster's name; cloud resources are tagged with it")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "client-side QPS limit to the apiserver, per controller as upstream's (upstream: 20)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "client-side burst to the apiserver, per controller (upstream: 30)")
	fs.IntVar(&o.ConcurrentNodeSyncs, "concurrent-node-syncs", o.ConcurrentNodeSyncs, "nodes initialized at once (upstream: 1)")
	fs.IntVar(&o.ConcurrentServiceSyncs, "concurrent-service-syncs", o.ConcurrentServiceSyncs, "Services synced at once (upstream: 1)")
	fs.StringVar(&o.LoadBalancerClass, "load-balancer-class", o.LoadBalancerClass, "serve only Services of this spec.loadBalancerClass (default: Services without a class)")
	fs.DurationVar(&o.NodeMonitorPeriod, "node-monitor-period", o.NodeMonitorPeriod, "how often the lifecycle controller checks not-ready nodes against the cloud")
	fs.DurationVar(&o.NodeStatusUpdateFrequency, "node-status-update-frequency", o.NodeStatusUpdateFrequency, "how often node addresses are synced from the cloud")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run only while holding the leader Lease (for several replicas)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a non-leader waits after the last renewal before taking over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader retries renewing before it gives up leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often to try to acquire or renew the Lease")
	fs.StringVar(&o.LeaderElectLockName, "leader-elect-resource-name", o.LeaderElectLockName, "name of the leader Lease")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-resource-namespace", o.LeaderElectNamespace, "namespace of the leader Lease")
	fs.StringVar(&o.LeaderElectResourceLock, "leader-elect-resource-lock", o.LeaderElectResourceLock, "lock type; only 'leases' is supported")
	fs.StringVar(&o.LeaderElectIdentity, "leader-elect-identity", o.LeaderElectIdentity, "this replica's identity in the Lease (default: hostname_<random>)")
	fs.BoolVar(&o.EnableLeaderMigration, "enable-leader-migration", o.EnableLeaderMigration, "run the migrated controllers under a migration lease shared with kube-controller-manager (needs --leader-elect)")
	fs.StringVar(&o.LeaderMigrationConfig, "leader-migration-config", o.LeaderMigrationConfig, "LeaderMigrationConfiguration file (default: upstream's default configuration)")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address to serve /healthz, /readyz, /livez and /metrics on")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "HTTPS port for /healthz, /readyz, /livez and /metrics (0: pick a free port)")
	fs.StringSliceVar(&o.AlwaysAllowPaths, "authorization-always-allow-paths", o.AlwaysAllowPaths, "paths served without authentication; others (/metrics) need a bearer token allowed by the apiserver (TokenReview and SubjectAccessReview)")
	fs.StringVar(&o.CertFile, "tls-cert-file", o.CertFile, "serving certificate (default: a self-signed one in memory)")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", o.KeyFile, "serving key")
	fs.StringVar(&o.TLSMinVersion, "tls-min-version", o.TLSMinVersion, "minimum TLS version served: VersionTLS12 or VersionTLS13 (default VersionTLS12)")
	fs.StringSliceVar(&o.TLSCipherSuites, "tls-cipher-suites", o.TLSCipherSuites, "TLS 1.2 cipher suites served, by IANA name (default: Go's secure defaults)")
	fs.BoolVar(&o.UseServiceAccountCredentials, "use-service-account-credentials", o.UseServiceAccountCredentials, "each controller uses the credentials of its own ServiceAccount in kube-system (node-controller, service-controller, route-controller)")
	o.NetworkOptions.addFlags(fs)
	o.WebhookOptions.AddFlags(fs)
	// Last: only the upstream flags not registered above.
	o.addCompatFlags(fs)
}

// Validate checks the options; the error is one line that says what to fix.
func (o *Options) Validate(known []Controller) error {
	var errs []string
	if o.CloudProvider == "" {
		errs = append(errs, "--cloud-provider is required")
	}
	if strings.TrimSpace(o.ClusterName) == "" {
		// Cloud resources are tagged and listed by it; empty would match every cluster's.
		errs = append(errs, "--cluster-name must not be empty (default: kubernetes)")
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, "--kube-api-qps and --kube-api-burst must be positive")
	}
	if o.ConcurrentNodeSyncs < 1 || o.ConcurrentServiceSyncs < 1 {
		errs = append(errs, "--concurrent-node-syncs and --concurrent-service-syncs must be at least 1")
	}
	if o.NodeMonitorPeriod <= 0 || o.NodeStatusUpdateFrequency <= 0 {
		errs = append(errs, "--node-monitor-period and --node-status-update-frequency must be positive")
	}
	if o.LeaderElect {
		if o.LeaderElectResourceLock != "leases" {
			errs = append(errs, fmt.Sprintf("--leader-elect-resource-lock=%s is not supported: use leases", o.LeaderElectResourceLock))
		}
		if !(o.LeaseDuration > o.RenewDeadline && o.RenewDeadline > o.RetryPeriod && o.RetryPeriod > 0) {
			errs = append(errs, "leader election needs lease-duration > renew-deadline > retry-period > 0")
		}
	}
	if o.SecurePort < 0 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Sprintf("--secure-port %d is out of range 0-65535", o.SecurePort))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, "--tls-cert-file and --tls-private-key-file go together")
	}
	if _, _, err := o.tlsSettings(); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := o.migration(); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := o.network(); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := EnabledControllers(o.Controllers, known); err != nil {
		errs = append(errs, err.Error())
	}
	errs = append(errs, o.WebhookOptions.Validate()...)
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// migration returns the leader migration configuration, or nil when
// migration is off. As upstream, it takes effect only with --leader-elect.
func (o *Options) migration() (*MigrationConfig, error) {
	if !o.EnableLeaderMigration {
		if o.LeaderMigrationConfig != "" {
			return nil, errors.New("--leader-migration-config needs --enable-leader-migration")
		}
		return nil, nil
	}
	cfg := DefaultMigrationConfig()
	if o.LeaderMigrationConfig != "" {
		var err error
		if cfg, err = LoadMigrationConfig(o.LeaderMigrationConfig); err != nil {
			return nil, err
		}
	}
	if !o.LeaderElect {
		return nil, nil
	}
	return &cfg, nil
}

// tlsSettings parses --tls-min-version and --tls-cipher-suites.
func (o *Options) tlsSettings() (minVersion uint16, suites []uint16, err error) {
	return parseTLSFlags("--", o.TLSMinVersion, o.TLSCipherSuites)
}

// parseTLSFlags parses <prefix>tls-min-version and <prefix>tls-cipher-suites,
// as upstream (k8s.io/component-base's names). TLS 1.0 and 1.1 are refused:
// a CCM has no old clients to serve.
func parseTLSFlags(prefix, minTLS string, cipherSuites []string) (minVersion uint16, suites []uint16, err error) {
	minVersion = tls.VersionTLS12
	if minTLS != "" {
		v, err := cliflag.TLSVersion(minTLS)
		if err != nil {
			return 0, nil, fmt.Errorf("%stls-min-version: %w", prefix, err)
		}
		if v < tls.VersionTLS12 {
			return 0, nil, fmt.Errorf("%stls-min-version=%s: Portside serves TLS 1.2 or later; use VersionTLS12 or VersionTLS13", prefix, minTLS)
		}
		minVersion = v
	}
	if len(cipherSuites) > 0 {
		if suites, err = cliflag.TLSCipherSuites(cipherSuites); err != nil {
			return 0, nil, fmt.Errorf("%stls-cipher-suites: %w (Go's names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)", prefix, err)
		}
	}
	return minVersion, suites, nil
}
