package manager

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
)

// UpstreamFlag is one command-line flag of upstream's cloud-controller-manager.
type UpstreamFlag struct {
	Name      string
	Shorthand string
	// Type is pflag's type name, as upstream's --help shows it.
	Type string
	// Default is upstream's default as pflag renders it.
	Default string
	// Deprecated is upstream's deprecation message (the flag is hidden).
	Deprecated string
}

// Upstream's deprecation messages, printed by pflag when the flag is used.
const (
	deprecatedUntagged = "This flag is deprecated and will be removed in a future release. A cluster-id will be required on cloud instances."
	deprecatedNoOp     = "This flag is currently no-op and will be deleted."
)

// UpstreamFlags are all flags of upstream's cloud-controller-manager v1.37
// (k8s.io/kubernetes/cmd/cloud-controller-manager at v1.37.2, built on
// k8s.io/cloud-provider v0.37.2): options.CloudControllerManagerOptions'
// flag sets (generic, kube-cloud-shared, node, node lifecycle and service
// controllers, secure serving, delegated authentication and authorization,
// webhooks and webhook serving), the node IPAM flags its main adds, and
// the global set of app.NewCloudControllerManagerCommand: --version,
// logging (-v, --vmodule, --logging-format, --log-flush-frequency,
// --log-text-*, and --log-json-* of providers that register the JSON
// format, as the sample main does) and --help. Printed by a program that
// builds that command and lists cmd.Flags() (name, shorthand,
// Value.Type(), DefValue, Deprecated).
var UpstreamFlags = []UpstreamFlag{
	{"allocate-node-cidrs", "", "bool", "false", ""},
	{"allow-untagged-cloud", "", "bool", "false", deprecatedUntagged},
	{"authentication-kubeconfig", "", "string", "", ""},
	{"authentication-skip-lookup", "", "bool", "false", ""},
	{"authentication-token-webhook-cache-ttl", "", "duration", "10s", ""},
	{"authentication-tolerate-lookup-failure", "", "bool", "false", ""},
	{"authorization-always-allow-paths", "", "stringSlice", "[/healthz,/readyz,/livez]", ""},
	{"authorization-kubeconfig", "", "string", "", ""},
	{"authorization-webhook-cache-authorized-ttl", "", "duration", "10s", ""},
	{"authorization-webhook-cache-unauthorized-ttl", "", "duration", "10s", ""},
	{"bind-address", "", "ip", "0.0.0.0", ""},
	{"cert-dir", "", "string", "", ""},
	{"cidr-allocator-type", "", "string", "RangeAllocator", ""},
	{"client-ca-file", "", "string", "", ""},
	{"cloud-config", "", "string", "", ""},
	{"cloud-provider", "", "string", "", ""},
	{"cluster-cidr", "", "string", "", ""},
	{"cluster-name", "", "string", "kubernetes", ""},
	{"concurrent-node-lifecycle-syncs", "", "int32", "1", ""},
	{"concurrent-node-status-updates", "", "int32", "0", ""},
	{"concurrent-node-syncs", "", "int32", "1", ""},
	{"concurrent-service-syncs", "", "int32", "1", ""},
	{"configure-cloud-routes", "", "bool", "true", ""},
	{"contention-profiling", "", "bool", "false", ""},
	{"controller-start-interval", "", "duration", "0s", ""},
	{"controllers", "", "stringSlice", "[*]", ""},
	{"disable-http2-serving", "", "bool", "false", ""},
	{"enable-leader-migration", "", "bool", "false", ""},
	{"external-cloud-volume-plugin", "", "string", "", ""},
	{"feature-gates", "", "mapStringBool", "", ""},
	{"help", "h", "bool", "false", ""},
	{"http2-max-streams-per-connection", "", "int", "0", ""},
	{"kube-api-burst", "", "int32", "30", ""},
	{"kube-api-content-type", "", "string", "application/vnd.kubernetes.protobuf", ""},
	{"kube-api-qps", "", "float32", "20", ""},
	{"kubeconfig", "", "string", "", ""},
	{"leader-elect", "", "bool", "true", ""},
	{"leader-elect-lease-duration", "", "duration", "15s", ""},
	{"leader-elect-renew-deadline", "", "duration", "10s", ""},
	{"leader-elect-resource-lock", "", "string", "leases", ""},
	{"leader-elect-resource-name", "", "string", "cloud-controller-manager", ""},
	{"leader-elect-resource-namespace", "", "string", "kube-system", ""},
	{"leader-elect-retry-period", "", "duration", "2s", ""},
	{"leader-migration-config", "", "string", "", ""},
	{"log-flush-frequency", "", "duration", "5s", ""},
	{"log-json-info-buffer-size", "", "quantity", "0", ""},
	{"log-json-split-stream", "", "bool", "false", ""},
	{"log-text-info-buffer-size", "", "quantity", "0", ""},
	{"log-text-split-stream", "", "bool", "false", ""},
	{"logging-format", "", "string", "text", ""},
	{"master", "", "string", "", ""},
	{"min-resync-period", "", "duration", "12h0m0s", ""},
	{"node-cidr-mask-size", "", "int32", "0", ""},
	{"node-cidr-mask-size-ipv4", "", "int32", "0", ""},
	{"node-cidr-mask-size-ipv6", "", "int32", "0", ""},
	{"node-monitor-period", "", "duration", "5s", ""},
	{"node-status-update-frequency", "", "duration", "5m0s", ""},
	{"node-sync-period", "", "duration", "0s", deprecatedNoOp},
	{"permit-address-sharing", "", "bool", "false", ""},
	{"permit-port-sharing", "", "bool", "false", ""},
	{"profiling", "", "bool", "true", ""},
	{"requestheader-allowed-names", "", "stringSlice", "[]", ""},
	{"requestheader-client-ca-file", "", "string", "", ""},
	{"requestheader-extra-headers-prefix", "", "stringSlice", "[x-remote-extra-]", ""},
	{"requestheader-group-headers", "", "stringSlice", "[x-remote-group]", ""},
	{"requestheader-uid-headers", "", "stringSlice", "[]", ""},
	{"requestheader-username-headers", "", "stringSlice", "[x-remote-user]", ""},
	{"route-reconciliation-period", "", "duration", "10s", ""},
	{"secure-port", "", "int", "10258", ""},
	{"service-cluster-ip-range", "", "string", "", ""},
	{"tls-cert-file", "", "string", "", ""},
	{"tls-cipher-suites", "", "stringSlice", "[]", ""},
	{"tls-curve-preferences", "", "int32Slice", "[]", ""},
	{"tls-min-version", "", "string", "", ""},
	{"tls-private-key-file", "", "string", "", ""},
	{"tls-sni-cert-key", "", "namedCertKey", "[]", ""},
	{"use-service-account-credentials", "", "bool", "false", ""},
	{"v", "v", "Level", "0", ""},
	{"version", "", "version", "false", ""},
	{"vmodule", "", "pattern=N,...", "", ""},
	{"webhook-bind-address", "", "ip", "0.0.0.0", ""},
	{"webhook-cert-dir", "", "string", "", ""},
	{"webhook-disable-http2-serving", "", "bool", "false", ""},
	{"webhook-secure-port", "", "int", "10260", ""},
	{"webhook-tls-cert-file", "", "string", "", ""},
	{"webhook-tls-cipher-suites", "", "stringSlice", "[]", ""},
	{"webhook-tls-curve-preferences", "", "int32Slice", "[]", ""},
	{"webhook-tls-min-version", "", "string", "", ""},
	{"webhook-tls-private-key-file", "", "string", "", ""},
	{"webhook-tls-sni-cert-key", "", "namedCertKey", "[]", ""},
	{"webhooks", "", "stringSlice", "[]", ""},
}

// providedElsewhere are upstream flags the ccm command gets from outside
// Options.AddFlags: klog's -v and --vmodule are persistent flags of the
// portside root command (internal/cli/root.go), --help is cobra's.
var providedElsewhere = map[string]bool{"v": true, "vmodule": true, "help": true}

// Why Portside accepts, and ignores, the upstream flags it does not
// implement. Flags of one group share the reason.
const (
	reasonAuthKubeconfig = "Portside reviews /metrics tokens (TokenReview, SubjectAccessReview) with its own apiserver client (--kubeconfig or in-cluster configuration), so it needs no kubeconfig for that"
	reasonAuthLookup     = "Portside reads no extension-apiserver-authentication ConfigMap: /metrics takes bearer tokens only"
	reasonClientCerts    = "Portside authenticates /metrics with bearer tokens only; client certificates and front-proxy (requestheader) authentication are not supported, such requests get 401"
	reasonAuthCacheTTL   = "Portside caches token and access review decisions for a fixed 10s (upstream's default)"
	reasonCertDir        = "without --tls-cert-file Portside serves a self-signed certificate kept in memory; nothing is written to a directory"
	reasonTLSParams      = "Portside serves Go's default curves (--tls-min-version and --tls-cipher-suites are honoured)"
	reasonSNI            = "Portside serves one certificate (--tls-cert-file) for every server name"
	reasonHTTP2          = "Portside's HTTPS endpoint uses Go's HTTP/2 defaults"
	reasonProfiling      = "Portside serves no /debug/pprof endpoints"
	reasonLogFormat      = "Portside logs in klog's text format"
	reasonLogStreams     = "Portside writes every log line to stderr, unbuffered"
	reasonWebhookSNI     = "Portside's webhook server serves one certificate (--webhook-tls-cert-file, or --webhook-cert-dir's pair) for every server name"
)

var ignoredReasons = map[string]string{
	"allow-untagged-cloud":                         "Portside never requires a cluster ID from the cloud: its cloud resources are tagged with --cluster-name",
	"authentication-kubeconfig":                    reasonAuthKubeconfig,
	"authorization-kubeconfig":                     reasonAuthKubeconfig,
	"authentication-skip-lookup":                   reasonAuthLookup,
	"authentication-tolerate-lookup-failure":       reasonAuthLookup,
	"authentication-token-webhook-cache-ttl":       reasonAuthCacheTTL,
	"authorization-webhook-cache-authorized-ttl":   reasonAuthCacheTTL,
	"authorization-webhook-cache-unauthorized-ttl": reasonAuthCacheTTL,
	"client-ca-file":                               reasonClientCerts,
	"requestheader-allowed-names":                  reasonClientCerts,
	"requestheader-client-ca-file":                 reasonClientCerts,
	"requestheader-extra-headers-prefix":           reasonClientCerts,
	"requestheader-group-headers":                  reasonClientCerts,
	"requestheader-uid-headers":                    reasonClientCerts,
	"requestheader-username-headers":               reasonClientCerts,
	"cert-dir":                                     reasonCertDir,
	"tls-curve-preferences":                        reasonTLSParams,
	"tls-sni-cert-key":                             reasonSNI,
	"disable-http2-serving":                        reasonHTTP2,
	"http2-max-streams-per-connection":             reasonHTTP2,
	"permit-address-sharing":                       "Go's listeners set SO_REUSEADDR already",
	"permit-port-sharing":                          "Portside does not set SO_REUSEPORT: one process per --secure-port",
	"profiling":                                    reasonProfiling,
	"contention-profiling":                         reasonProfiling,
	"concurrent-node-status-updates":               "Portside's cloud-node-controller updates node status with its --concurrent-node-syncs workers",
	"concurrent-node-lifecycle-syncs":              "Portside's cloud-node-lifecycle-controller runs --concurrent-node-syncs workers",
	"node-sync-period":                             "a no-op upstream too (deprecated)",
	"min-resync-period":                            "Portside's informers never resync; its controllers repair drift on their own periods (--node-status-update-frequency, --node-monitor-period, --route-reconciliation-period)",
	"controller-start-interval":                    "Portside starts its controllers one after another, without a pause",
	"external-cloud-volume-plugin":                 "it serves kube-controller-manager's in-tree volume controllers; the CCM runs none",
	"use-service-account-credentials":              "every controller uses the CCM's own credentials",
	"master":                                       "Portside connects with --kubeconfig or the in-cluster configuration; give the apiserver's address in the kubeconfig",
	"kube-api-content-type":                        "Portside always talks protobuf to the apiserver, JSON where protobuf is not available (upstream's default)",
	"logging-format":                               reasonLogFormat,
	"log-flush-frequency":                          "Portside writes every log line to stderr as it comes, so there is nothing to flush",
	"log-text-split-stream":                        reasonLogStreams,
	"log-text-info-buffer-size":                    reasonLogStreams,
	"log-json-split-stream":                        reasonLogStreams,
	"log-json-info-buffer-size":                    reasonLogStreams,
	"version":                                      "Portside reports its own version (portside version)",
	"webhook-tls-sni-cert-key":                     reasonWebhookSNI,
	"feature-gates":                                "Portside has no feature gates", // see featureGatesReason
}

// featureGateBehaviour says, for the upstream gates that concern a CCM,
// what Portside does regardless of the gate.
var featureGateBehaviour = map[string]string{
	"CloudControllerManagerWatchBasedRoutesReconciliation": "the route controller always follows node events (as =true)",
	"CloudControllerManagerWebhook":                        "the webhooks --webhooks enables are served (as =true)",
	"ControllerManagerReleaseLeaderElectionLockOnExit":     "the Lease is always released on shutdown (as =true)",
	"CoordinatedLeaderElection":                            "leader election is always Portside's own Lease (as =false)",
	"ContextualLogging":                                    "logging is always contextual (as =true)",
	"LoggingAlphaOptions":                                  "the --log-* options are ignored",
	"LoggingBetaOptions":                                   "the --log-* options are ignored",
}

func featureGatesReason(gates map[string]bool) string {
	var notes []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		if b, ok := featureGateBehaviour[name]; ok {
			notes = append(notes, name+": "+b)
		} else {
			notes = append(notes, name+": no effect")
		}
	}
	return "Portside has no feature gates; " + strings.Join(notes, "; ")
}

// IgnoredFlag is an upstream flag given on the command line that Portside
// accepts and does not act on.
type IgnoredFlag struct {
	Name   string // without dashes
	Value  string // as given; lists comma-separated
	Reason string
}

func (f IgnoredFlag) String() string {
	return fmt.Sprintf("--%s=%s: %s", f.Name, f.Value, f.Reason)
}

// compatFlags are the upstream flags AddFlags registered without
// implementing them.
type compatFlags struct {
	flags       []*pflag.Flag
	version     *versionValue
	featureGate map[string]bool
}

// addCompatFlags registers every upstream flag that fs does not have yet
// and that the command does not get elsewhere, with upstream's type (so
// its syntax parses as upstream's), default and deprecation. They are
// hidden from --help; IgnoredFlags reports those that were set.
func (o *Options) addCompatFlags(fs *pflag.FlagSet) {
	o.compat = &compatFlags{}
	for _, u := range UpstreamFlags {
		if providedElsewhere[u.Name] || fs.Lookup(u.Name) != nil {
			continue
		}
		usage := "accepted for compatibility with upstream's cloud-controller-manager, and ignored: " + ignoredReasons[u.Name]
		if u.Name == "version" {
			usage = "upstream's --version (Portside's version: `portside version`)"
		}
		o.compat.register(fs, u, usage)
		f := fs.Lookup(u.Name)
		f.Hidden = true
		if u.Deprecated != "" {
			f.Deprecated = u.Deprecated
		}
		o.compat.flags = append(o.compat.flags, f)
	}
}

// register adds u to fs with a value of upstream's type and default.
func (c *compatFlags) register(fs *pflag.FlagSet, u UpstreamFlag, usage string) {
	switch u.Type {
	case "bool":
		fs.Bool(u.Name, u.Default == "true", usage)
	case "string":
		fs.String(u.Name, u.Default, usage)
	case "int":
		n, _ := strconv.Atoi(u.Default)
		fs.Int(u.Name, n, usage)
	case "int32":
		n, _ := strconv.ParseInt(u.Default, 10, 32)
		fs.Int32(u.Name, int32(n), usage)
	case "duration":
		d, _ := time.ParseDuration(u.Default)
		fs.Duration(u.Name, d, usage)
	case "ip":
		fs.IP(u.Name, net.ParseIP(u.Default), usage)
	case "stringSlice":
		def := []string{}
		if s := strings.Trim(u.Default, "[]"); s != "" {
			def = strings.Split(s, ",")
		}
		fs.StringSlice(u.Name, def, usage)
	case "int32Slice":
		fs.Int32Slice(u.Name, []int32{}, usage)
	case "mapStringBool":
		if u.Name == "feature-gates" {
			fs.Var(cliflag.NewMapStringBool(&c.featureGate), u.Name, usage)
		} else {
			var m map[string]bool
			fs.Var(cliflag.NewMapStringBool(&m), u.Name, usage)
		}
	case "namedCertKey":
		var keys []cliflag.NamedCertKey
		fs.Var(cliflag.NewNamedCertKeyArray(&keys), u.Name, usage)
	case "quantity":
		fs.Var(&resource.QuantityValue{Quantity: resource.MustParse(u.Default)}, u.Name, usage)
	case "version":
		c.version = new(versionValue)
		*c.version = versionValue(u.Default)
		fs.Var(c.version, u.Name, usage)
		fs.Lookup(u.Name).NoOptDefVal = "true"
	default:
		panic(fmt.Sprintf("upstream flag --%s: no compatibility value for type %s", u.Name, u.Type))
	}
}

// IgnoredFlags returns the upstream flags set on the command line that
// Portside accepted without implementing them, in name order, each with
// the reason.
func (o *Options) IgnoredFlags() []IgnoredFlag {
	if o.compat == nil {
		return nil
	}
	var out []IgnoredFlag
	for _, f := range o.compat.flags {
		if !f.Changed {
			continue
		}
		reason := ignoredReasons[f.Name]
		switch f.Name {
		case "version":
			if !o.compat.version.dynamic() {
				continue // printing the version is the command's job (VersionRequested)
			}
		case "feature-gates":
			reason = featureGatesReason(o.compat.featureGate)
		}
		value := f.Value.String()
		if s, ok := f.Value.(pflag.SliceValue); ok {
			value = strings.Join(s.GetSlice(), ",")
		} else if f.Value.Type() == "namedCertKey" {
			value = strings.TrimSuffix(strings.TrimPrefix(value, "["), "]")
		}
		out = append(out, IgnoredFlag{Name: f.Name, Value: value, Reason: reason})
	}
	return out
}

// IgnoredFlagsLogValues returns the key/value pairs of the start-up log
// line about ignored upstream flags, or nil when none was set; flags that
// share a reason share an entry:
//
//	"ignored", ["--profiling=true, --contention-profiling=true: Portside serves no /debug/pprof endpoints", ...]
func (o *Options) IgnoredFlagsLogValues() []any {
	ignored := o.IgnoredFlags()
	if len(ignored) == 0 {
		return nil
	}
	// One entry per reason: "--a=1, --b=2: reason".
	var reasons []string
	flags := map[string][]string{}
	for _, f := range ignored {
		if _, ok := flags[f.Reason]; !ok {
			reasons = append(reasons, f.Reason)
		}
		flags[f.Reason] = append(flags[f.Reason], "--"+f.Name+"="+f.Value)
	}
	lines := make([]string, len(reasons))
	for i, r := range reasons {
		lines[i] = strings.Join(flags[r], ", ") + ": " + r
	}
	return []any{"ignored", lines}
}

// LogIgnoredFlags logs, in one line, which upstream flags were given that
// Portside accepts and ignores, and why; nothing when there are none.
func (o *Options) LogIgnoredFlags(logger klog.Logger) {
	if kv := o.IgnoredFlagsLogValues(); kv != nil {
		logger.Info("Accepted upstream cloud-controller-manager flags that Portside ignores", kv...)
	}
}

// VersionRequested reports upstream's --version: requested is true for
// --version (or =true) and --version=raw, and raw for the latter. The
// command then prints the version and exits instead of running.
func (o *Options) VersionRequested() (raw, requested bool) {
	if o.compat == nil || o.compat.version == nil {
		return false, false
	}
	switch *o.compat.version {
	case versionRaw:
		return true, true
	case versionTrue:
		return false, true
	}
	return false, false
}

// versionValue is upstream's --version (k8s.io/component-base/version/verflag):
// a bool that also takes "raw", or vX.Y.Z to set the reported version.
type versionValue string

const (
	versionFalse versionValue = "false"
	versionTrue  versionValue = "true"
	versionRaw   versionValue = "raw"
)

func (v *versionValue) IsBoolFlag() bool { return true }
func (v *versionValue) String() string   { return string(*v) }
func (v *versionValue) Type() string     { return "version" }

func (v *versionValue) Set(s string) error {
	if s == string(versionRaw) {
		*v = versionRaw
		return nil
	}
	if strings.HasPrefix(s, "v") {
		if _, err := utilversion.ParseSemantic(s); err != nil {
			return err
		}
		*v = versionValue(s)
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v = versionFalse
	if b {
		*v = versionTrue
	}
	return nil
}

// dynamic is --version=vX.Y.Z, upstream's override of the reported version.
func (v *versionValue) dynamic() bool { return strings.HasPrefix(string(*v), "v") }
