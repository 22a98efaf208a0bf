package manager_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/manager/upstreammanifest"
	"github.com/portside-io/portside/pkg/cloud"
)

// ccmCommand returns the `portside ccm` command of the real command tree.
func ccmCommand(t *testing.T) *cobra.Command {
	t.Helper()
	ccm, _, err := cli.NewRootCommand().Find([]string{"ccm"})
	if err != nil || ccm.Name() != "ccm" {
		t.Fatalf("no ccm command: %v", err)
	}
	ccm.InitDefaultHelpFlag()
	ccm.Flags().SetOutput(io.Discard) // upstream's deprecation notices
	// -v sets klog's global verbosity: put it back.
	t.Cleanup(func() { _ = klogFlagSet().Set("v", "0") })
	return ccm
}

// klogFlagSet is the portside root command's persistent flags (klog's -v
// and --vmodule), which `portside ccm` inherits.
func klogFlagSet() *pflag.FlagSet { return cli.NewRootCommand().PersistentFlags() }

// parseOnCommand parses args as `portside ccm` does: its own flags merged
// with the root's persistent ones, no positional arguments.
func parseOnCommand(t *testing.T, args []string) error {
	t.Helper()
	ccm := ccmCommand(t)
	if err := ccm.ParseFlags(args); err != nil {
		return err
	}
	if rest := ccm.Flags().Args(); len(rest) > 0 {
		return errors.New("positional arguments left: " + strings.Join(rest, " "))
	}
	return nil
}

// optionsFlagSet builds the flag set of `portside ccm` around o, as
// internal/cli does: Options.AddFlags plus the root's persistent flags.
func optionsFlagSet(o *manager.Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("ccm", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // upstream's deprecation notices
	o.AddFlags(fs)
	fs.AddFlagSet(klogFlagSet())
	return fs
}

// The flag set the tests build around their own Options is the command's.
func TestCompatFlagSetIsTheCommands(t *testing.T) {
	ccm := ccmCommand(t)
	if err := ccm.ParseFlags(nil); err != nil { // merges the persistent flags
		t.Fatal(err)
	}
	names := func(fs *pflag.FlagSet) []string {
		var out []string
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				out = append(out, f.Name)
			}
		})
		slices.Sort(out)
		return out
	}
	got, want := names(optionsFlagSet(manager.NewOptions())), names(ccm.Flags())
	if !slices.Equal(got, want) {
		t.Fatalf("flag sets differ:\n tests:   %v\n command: %v", got, want)
	}
}

// exampleValue is a value in upstream's syntax for each upstream flag type.
var exampleValue = map[string]string{
	"bool":          "", // no value: --flag
	"string":        "example",
	"int":           "3",
	"int32":         "3",
	"float32":       "5",
	"duration":      "30s",
	"ip":            "127.0.0.1",
	"stringSlice":   "a,b",
	"int32Slice":    "23,24",
	"mapStringBool": "CloudControllerManagerWatchBasedRoutesReconciliation=true,SomeGate=false",
	"namedCertKey":  "/etc/tls/a.crt,/etc/tls/a.key:example.com",
	"quantity":      "1Mi",
	"version":       "v1.37.2",
	"Level":         "3",
	"pattern=N,...": "manager=4",
}

// Values that Validate accepts, for flags where the type's example would not do.
var validValue = map[string]string{
	"cloud-provider":              "local",
	"controllers":                 "*,-cloud-node",
	"cluster-cidr":                "10.244.0.0/16",
	"service-cluster-ip-range":    "10.96.0.0/12",
	"cidr-allocator-type":         "RangeAllocator",
	"leader-elect-resource-lock":  "leases",
	"node-cidr-mask-size-ipv4":    "", // not with --node-cidr-mask-size
	"node-cidr-mask-size-ipv6":    "",
	"leader-elect-renew-deadline": "10s",
	"leader-elect-lease-duration": "15s",
	"leader-elect-retry-period":   "2s",
	"leader-migration-config":     "", // a file
	"enable-leader-migration":     "",
	"cloud-config":                "", // a file
	"kubeconfig":                  "",
	"tls-cert-file":               "", // a file
	"tls-private-key-file":        "",
	"help":                        "",
	"tls-min-version":             "VersionTLS13",
	"tls-cipher-suites":           "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"webhooks":                    "*,-persistent-volume-label",
	"webhook-tls-min-version":     "VersionTLS13",
	"webhook-tls-cipher-suites":   "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
}

func flagArg(u manager.UpstreamFlag, value string) string {
	if u.Type == "bool" && value == "" {
		return "--" + u.Name
	}
	return "--" + u.Name + "=" + value
}

// Every flag of upstream's cloud-controller-manager parses, with upstream's
// syntax, on `portside ccm`; each one Portside does not implement is
// reported as ignored, with a reason.
func TestCompatEveryUpstreamFlagParses(t *testing.T) {
	if len(manager.UpstreamFlags) < 90 {
		t.Fatalf("only %d upstream flags listed", len(manager.UpstreamFlags))
	}
	implemented := map[string]bool{}
	optionsFlagSet(manager.NewOptions()).VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			implemented[f.Name] = true
		}
	})
	for _, u := range manager.UpstreamFlags {
		t.Run(u.Name, func(t *testing.T) {
			value, ok := exampleValue[u.Type]
			if !ok {
				t.Fatalf("no example for type %s", u.Type)
			}
			args := []string{flagArg(u, value)}
			if u.Name == "help" {
				args = []string{"-h"}
			}
			if err := parseOnCommand(t, args); err != nil {
				t.Fatalf("portside ccm %v: %v", args, err)
			}
			if u.Shorthand != "" {
				if err := parseOnCommand(t, []string{"-" + u.Shorthand + "=" + value}); err != nil && u.Name != "help" {
					t.Errorf("portside ccm -%s=%s: %v", u.Shorthand, value, err)
				}
			}
			if u.Name == "help" {
				return // cobra's
			}
			o := manager.NewOptions()
			fs := optionsFlagSet(o)
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			var ignored []string
			for _, f := range o.IgnoredFlags() {
				ignored = append(ignored, f.Name)
				if f.Reason == "" {
					t.Errorf("--%s is ignored without a reason", f.Name)
				}
			}
			switch {
			case implemented[u.Name]:
				if len(ignored) > 0 {
					t.Errorf("Portside implements --%s, yet reports it ignored", u.Name)
				}
			case !slices.Equal(ignored, []string{u.Name}):
				t.Errorf("--%s: ignored flags reported %v", u.Name, ignored)
			}
			// The compatibility flag has upstream's type and default.
			if f := fs.Lookup(u.Name); f != nil && f.Hidden && f.Deprecated == "" && u.Name != "version" {
				if f.Value.Type() != u.Type || f.DefValue != u.Default {
					t.Errorf("--%s is %s, default %q; upstream's is %s, default %q", u.Name, f.Value.Type(), f.DefValue, u.Type, u.Default)
				}
			}
		})
	}
}

// A manifest that sets every upstream flag Portside ignores still validates.
func TestCompatAllFlagsAtOnceValidate(t *testing.T) {
	var args []string
	for _, u := range manager.UpstreamFlags {
		value, ok := validValue[u.Name]
		if !ok {
			value = exampleValue[u.Type]
		}
		if u.Name == "help" || (value == "" && u.Type != "bool") || (u.Type == "bool" && ok) {
			continue
		}
		args = append(args, flagArg(u, value))
	}
	args = append(args, "--allocate-node-cidrs=true", "--node-cidr-mask-size=24")
	if err := parseOnCommand(t, args); err != nil {
		t.Fatalf("portside ccm: %v", err)
	}
	o := manager.NewOptions()
	if err := optionsFlagSet(o).Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(manager.DefaultControllers()); err != nil {
		t.Fatalf("Validate: %v\nargs: %v", err, args)
	}
	kv := o.IgnoredFlagsLogValues()
	if len(kv) != 2 || kv[0] != "ignored" {
		t.Fatalf("log values: %v", kv)
	}
	lines := kv[1].([]string)
	for _, want := range []string{
		"--use-service-account-credentials", // implemented
		"--v=", "--vmodule=", "--kube-api-qps=", "--cloud-provider=",
		"--webhooks=", "--webhook-bind-address=", "--webhook-secure-port=", "--webhook-tls-curve-preferences=",
	} {
		for _, l := range lines {
			if strings.HasPrefix(l, want) {
				t.Errorf("implemented flag reported ignored: %s", l)
			}
		}
	}
	for _, want := range []string{
		"--authentication-kubeconfig=example, --authorization-kubeconfig=example: ",
		"--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true,SomeGate=false: Portside has no feature gates; CloudControllerManagerWatchBasedRoutesReconciliation: the route controller always follows node events (as =true); SomeGate: no effect",
		"--contention-profiling=true, --profiling=true: Portside serves no /debug/pprof endpoints",
		"--tls-curve-preferences=23,24: ",
		"--tls-sni-cert-key=/etc/tls/a.crt,/etc/tls/a.key:example.com: ",
		"--version=v1.37.2: ",
		"--webhook-tls-sni-cert-key=/etc/tls/a.crt,/etc/tls/a.key:example.com: Portside's webhook server serves one certificate",
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("no line %q in %v", want, lines)
		}
	}
	var buf bytes.Buffer
	logger := klog.NewKlogr()
	klog.SetOutput(&buf)
	klog.LogToStderr(false)
	defer klog.LogToStderr(true)
	o.LogIgnoredFlags(logger)
	klog.Flush()
	t.Logf("%s", buf.String())
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "Portside ignores") || !strings.Contains(out, "--master=example") {
		t.Errorf("log line: %q", out)
	}
}

// Upstream's syntax errors are errors here too.
func TestCompatFlagSyntaxErrors(t *testing.T) {
	for _, arg := range []string{
		"--profiling=maybe",
		"--min-resync-period=12",
		"--feature-gates=SomeGate",
		"--feature-gates=SomeGate=maybe",
		"--webhook-bind-address=not-an-ip",
		"--tls-curve-preferences=x",
		"--log-text-info-buffer-size=lots",
		"--version=later",
		"--concurrent-node-lifecycle-syncs=many",
		"--no-such-flag",
	} {
		if err := parseOnCommand(t, []string{arg}); err == nil {
			t.Errorf("portside ccm %s: no error", arg)
		}
	}
}

func TestCompatVersionFlag(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		raw, requested bool
		ignored        bool
	}{
		{nil, false, false, false},
		{[]string{"--version"}, false, true, false},
		{[]string{"--version=true"}, false, true, false},
		{[]string{"--version=raw"}, true, true, false},
		{[]string{"--version=false"}, false, false, false},
		{[]string{"--version=v1.37.2"}, false, false, true},
	} {
		o := manager.NewOptions()
		if err := optionsFlagSet(o).Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		raw, requested := o.VersionRequested()
		if raw != tc.raw || requested != tc.requested || (len(o.IgnoredFlags()) == 1) != tc.ignored {
			t.Errorf("%v: raw %v requested %v ignored %v", tc.args, raw, requested, o.IgnoredFlags())
		}
	}
}

// As upstream's, flag names take '_' for '-'; klog's -v takes both forms.
func TestCompatFlagSpellings(t *testing.T) {
	args := []string{"--cloud_provider=local", "--leader_elect=false", "--use_service_account_credentials", "-v", "2", "--concurrent_node_status_updates=4"}
	if err := parseOnCommand(t, args); err != nil {
		t.Fatal(err)
	}
	o := manager.NewOptions()
	if err := optionsFlagSet(o).Parse(args); err != nil {
		t.Fatal(err)
	}
	if o.CloudProvider != "local" || o.LeaderElect || !o.UseServiceAccountCredentials {
		t.Errorf("options: provider %q leader-elect %v service accounts %v", o.CloudProvider, o.LeaderElect, o.UseServiceAccountCredentials)
	}
	if ig := o.IgnoredFlags(); len(ig) != 1 || ig[0].Name != "concurrent-node-status-updates" || ig[0].Value != "4" {
		t.Errorf("ignored: %v", ig)
	}
}

// Portside's own defaults stay where they differ from upstream's.
func TestCompatKeepsPortsideDefaults(t *testing.T) {
	o := manager.NewOptions()
	if err := optionsFlagSet(o).Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := manager.NewOptions()
	if o.ConcurrentServiceSyncs != want.ConcurrentServiceSyncs || o.ConcurrentNodeSyncs != want.ConcurrentNodeSyncs ||
		o.KubeAPIQPS != want.KubeAPIQPS || o.RouteReconciliationPeriod != want.RouteReconciliationPeriod {
		t.Errorf("defaults changed: %+v", o)
	}
	if o.IgnoredFlags() != nil {
		t.Errorf("ignored without flags: %v", o.IgnoredFlags())
	}
}

// manifestCase is a real manifest of upstream's or a provider's CCM.
type manifestCase struct {
	file    string
	ignored []string // flags reported ignored
	check   func(t *testing.T, o *manager.Options)
}

var manifestCases = []manifestCase{
	{file: "kubernetes-website-ccm-example.yaml", check: func(t *testing.T, o *manager.Options) {
		if !o.LeaderElect || !o.UseServiceAccountCredentials || !o.AllocateNodeCIDRs || !o.ConfigureCloudRoutes || o.ClusterCIDR != "172.17.0.0/16" {
			t.Errorf("options: %+v", o)
		}
	}},
	{file: "cloud-provider-aws-dual-stack-daemonset.yaml", check: func(t *testing.T, o *manager.Options) {
		if !o.UseServiceAccountCredentials || o.ConfigureCloudRoutes {
			t.Errorf("options: %+v", o)
		}
	}},
	{file: "cloud-provider-openstack-ds.yaml", check: func(t *testing.T, o *manager.Options) {
		if !o.UseServiceAccountCredentials || o.BindAddress != "127.0.0.1" {
			t.Errorf("options: %+v", o)
		}
	}},
	{file: "hcloud-ccm-networks.yaml", ignored: []string{"allow-untagged-cloud"}, check: func(t *testing.T, o *manager.Options) {
		if o.LeaderElect || o.RouteReconciliationPeriod != 30*time.Second || !o.AllocateNodeCIDRs || o.ClusterCIDR != "10.244.0.0/16" {
			t.Errorf("options: %+v", o)
		}
	}},
	{file: "cloud-provider-azure-out-of-tree.yaml", check: func(t *testing.T, o *manager.Options) {
		if o.ClusterName != "k8s" || o.SecurePort != 10267 || !slices.Equal(o.Controllers, []string{"*", "-cloud-node"}) || o.RouteReconciliationPeriod != 10*time.Second {
			t.Errorf("options: %+v", o)
		}
		enabled, err := manager.EnabledControllers(o.Controllers, manager.DefaultControllers())
		if err != nil || slices.ContainsFunc(enabled, func(c manager.Controller) bool { return c.Name == "cloud-node-controller" }) {
			t.Errorf("--controllers=*,-cloud-node: %v %v", err, enabled)
		}
	}},
}

// The command lines of real manifests (upstream's sample DaemonSet and
// providers' manifests, testdata/upstream-manifests) run `portside ccm` as
// far as a test can without a cluster: the flags parse on the command,
// the options validate, the provider is built from --cloud-config and the
// client from --kubeconfig; the ignored flags are reported. What a pod
// gets from its environment is stood in for: the provider is "local", and
// --cloud-config and --kubeconfig are files of the test.
func TestCompatUpstreamManifests(t *testing.T) {
	dir := t.TempDir()
	cloudConfig := filepath.Join(dir, "cloud.yaml")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeFile(t, cloudConfig, "endpoint: https://127.0.0.1:1\ntoken: test\n")
	writeFile(t, kubeconfig, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: test}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	for _, tc := range manifestCases {
		t.Run(tc.file, func(t *testing.T) {
			argv := manifestArgs(t, filepath.Join("testdata", "upstream-manifests", tc.file))
			args := standIns(argv, cloudConfig, kubeconfig)
			t.Logf("manifest: %q\nrun with: %q", argv, args)
			if err := parseOnCommand(t, args); err != nil {
				t.Fatalf("portside ccm: %v", err)
			}
			o := manager.NewOptions()
			if err := optionsFlagSet(o).Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(manager.DefaultControllers()); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			p, err := cloud.New(context.Background(), o.CloudProvider, o.CloudConfig)
			if err != nil || p == nil {
				t.Fatalf("provider: %v", err)
			}
			if _, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig); err != nil {
				t.Fatalf("client configuration: %v", err)
			}
			var ignored []string
			for _, f := range o.IgnoredFlags() {
				ignored = append(ignored, f.Name)
			}
			if !slices.Equal(ignored, tc.ignored) {
				t.Errorf("ignored flags %v, want %v (%v)", ignored, tc.ignored, o.IgnoredFlagsLogValues())
			}
			tc.check(t, o)
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// manifestArgs returns the flags the CCM container of a manifest runs with.
func manifestArgs(t *testing.T, path string) []string {
	t.Helper()
	argv, err := upstreammanifest.Args(path)
	if err != nil {
		t.Fatal(err)
	}
	return argv
}

// standIns replaces what the manifest's pod gets from its cluster: the
// provider becomes local, --cloud-config and --kubeconfig the test's files
// (added when the manifest has none: in a pod the provider reads its
// credentials from elsewhere and the client uses the in-cluster config).
func standIns(argv []string, cloudConfig, kubeconfig string) []string {
	return upstreammanifest.StandIns(argv, map[string]string{"cloud-provider": "local", "cloud-config": cloudConfig, "kubeconfig": kubeconfig})
}
