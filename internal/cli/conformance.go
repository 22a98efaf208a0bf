package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/conformance"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/client"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

type conformanceOptions struct {
	kubeconfig, kubeContext                 string
	capabilities, extraCapabilities         string
	cloudProvider, cloudConfig              string
	cloudDataDir, cloudEndpoint, cloudToken string
	instanceHook, providerName              string
	credConfig, credBinDir, credImage       string
	maxWait                                 time.Duration
	focus, skip, junit, namespace           string
	verbose, list, cleanup                  bool
}

func newConformanceCommand() *cobra.Command {
	var o conformanceOptions
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the provider conformance suite against a cluster",
		Long: "Run real scenarios against the cluster of --kubeconfig, whose cloud controller manager is Portside's or\n" +
			"upstream's, with any provider: node initialization, provided-node-ip, node deletion, routes, PV labels,\n" +
			"registry credentials, apiserver-to-kubelet egress and load balancers. Each test needs capabilities and is\n" +
			"skipped, with the reason, when the run lacks one: give them with --capabilities, or with --cloud-provider\n" +
			"(and --cloud-config) to ask a Portside provider what it supports.\n\n" +
			"With the local cloud (--cloud-data-dir, e.g. <portside up data dir>/cloud), tests create instances and\n" +
			"volumes to exercise the CCM and check the cloud's side. Every object a run creates is labeled\n" +
			conformance.RunLabel + "=<run> and removed at its end, also on SIGINT (a second SIGINT or SIGTERM exits\n" +
			"at once); --cleanup removes those of interrupted runs.\n\n" +
			"Exit status: 0 when no test failed, 1 otherwise, 130 after a second signal.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConformance(cmd.Context(), cmd.OutOrStdout(), &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.kubeContext, "context", "", "kubeconfig context (default: the current context)")
	f.StringVar(&o.capabilities, "capabilities", "", "capabilities the run may use, comma separated, or \"all\" (valid: "+
		strings.Join(capabilityNames(), ", ")+"); default: those --cloud-provider reports, and what the other flags allow")
	f.StringVar(&o.extraCapabilities, "extra-capabilities", "", "capabilities added to those --cloud-provider reports (e.g. lb-ip-mode)")
	f.StringVar(&o.cloudProvider, "cloud-provider", "", "a Portside provider (registered: "+strings.Join(cloud.Registered(), ", ")+") to discover capabilities and the providerID scheme from")
	f.StringVar(&o.cloudConfig, "cloud-config", "", "the provider's cloud config file")
	f.StringVar(&o.cloudDataDir, "cloud-data-dir", "", "a local cloud's data directory (<dir>/endpoint and <dir>/token): tests create instances and volumes in it")
	f.StringVar(&o.cloudEndpoint, "cloud-endpoint", "", "a local cloud's API address, instead of --cloud-data-dir (with --cloud-token-file)")
	f.StringVar(&o.cloudToken, "cloud-token-file", "", "the file holding the local cloud's API token (with --cloud-endpoint)")
	f.StringVar(&o.instanceHook, "instance-hook", "", "a command line that deletes the instance whose providerID is appended to it (nodes/lifecycle)")
	f.StringVar(&o.providerName, "provider-name", "", "the providerID scheme Nodes must have (default: --cloud-provider's, else the first Node's)")
	f.StringVar(&o.credConfig, "credential-provider-config", "", "the kubelet's CredentialProviderConfig (credentials/round-trip)")
	f.StringVar(&o.credBinDir, "credential-provider-bin-dir", "", "the kubelet's credential provider plugin directory")
	f.StringVar(&o.credImage, "credential-provider-image", "", "an image of a registry that needs the plugin's credentials")
	f.StringVar(&o.focus, "focus", "", "run only the tests whose name matches this regular expression")
	f.StringVar(&o.skip, "skip", "", "leave out the tests whose name matches this regular expression")
	f.StringVar(&o.junit, "junit", "", "also write the results as JUnit XML to this file")
	f.DurationVar(&o.maxWait, "max-wait", 0, "cap every wait of every test at this (e.g. 20s on a local cloud that converges in seconds, so a broken one fails fast; default: each test's own bounds, up to minutes)")
	f.StringVar(&o.namespace, "namespace", "", "the run's namespace, created and deleted by the run (default: portside-conformance-<run>)")
	// -v is the root's klog verbosity; here it is a switch.
	f.BoolVarP(&o.verbose, "v", "v", false, "verbose: print each test as it starts, skip reasons and the tests' logs")
	f.BoolVar(&o.list, "list", false, "list the tests with what they need, and exit")
	f.BoolVar(&o.cleanup, "cleanup", false, "delete what interrupted runs left (objects labeled "+conformance.RunLabel+"), and exit")
	return cmd
}

func capabilityNames() []string {
	names := make([]string, len(conformance.AllCapabilities))
	for i, c := range conformance.AllCapabilities {
		names[i] = string(c)
	}
	return names
}

func runConformance(ctx context.Context, w io.Writer, o *conformanceOptions) error {
	opts := conformance.RunOptions{Verbose: o.verbose, Out: w}
	for _, re := range []struct {
		flag, expr string
		dst        **regexp.Regexp
	}{{"--focus", o.focus, &opts.Focus}, {"--skip", o.skip, &opts.Skip}} {
		if re.expr == "" {
			continue
		}
		r, err := regexp.Compile(re.expr)
		if err != nil {
			return fmt.Errorf("%s: %w", re.flag, err)
		}
		*re.dst = r
	}
	tests := conformance.Tests()
	if o.list {
		return listTests(w, tests, opts)
	}

	env := &conformance.Env{
		ProviderName:             o.providerName,
		CredentialProviderConfig: o.credConfig, CredentialProviderBinDir: o.credBinDir, CredentialProviderImage: o.credImage,
		Namespace: o.namespace, MaxWait: o.maxWait,
	}
	if o.instanceHook != "" {
		env.InstanceHook = strings.Fields(o.instanceHook)
	}
	var err error
	if env.Cloud, err = localCloud(o); err != nil {
		return err
	}
	caps, err := runCapabilities(ctx, o, env)
	if err != nil {
		return err
	}
	env.Capabilities = caps

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if env.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	env.RESTConfig = cfg
	if o.cleanup {
		return conformanceCleanup(ctx, w, env)
	}
	if env.ProviderName == "" {
		env.ProviderName = providerNameFromNodes(ctx, env.Client)
	}
	env.RunID = conformance.NewRunID()
	fmt.Fprintf(w, "run %s against %s; capabilities: %s; providerID scheme: %s\n", env.RunID, cfg.Host,
		orNone(conformance.CapabilityList(env.Capabilities)), orNone(env.ProviderName))

	// The first signal stops the tests and runs their clean-ups (up to
	// conformance.CleanupTimeout each); a second one exits at once.
	stopWatch := exitOnSecondSignal(w, "`portside conformance --cleanup` removes what the run left")
	defer stopWatch()
	results := conformance.Run(ctx, env, tests, opts)
	fmt.Fprintln(w)
	if err := conformance.WriteTable(w, results); err != nil {
		return err
	}
	if o.junit != "" {
		if err := writeJUnitFile(o.junit, results); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: the run's clean-ups ran; `portside conformance --cleanup` removes anything left")
	}
	if _, failed, _, _ := conformance.Summary(results); failed > 0 {
		return fmt.Errorf("%d of %d tests failed", failed, len(results))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func listTests(w io.Writer, tests []conformance.Test, opts conformance.RunOptions) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNEEDS\tTIMEOUT")
	for _, tc := range tests {
		if !opts.Selected(tc.Name) {
			continue
		}
		needs := make([]string, len(tc.Needs))
		for i, c := range tc.Needs {
			needs[i] = string(c)
		}
		timeout := tc.Timeout
		if timeout <= 0 {
			timeout = conformance.DefaultTimeout
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\n", tc.Name, orNone(strings.Join(needs, ",")), timeout)
	}
	return tw.Flush()
}

// localCloud is the local cloud's client of --cloud-data-dir or
// --cloud-endpoint, or nil.
func localCloud(o *conformanceOptions) (*client.Client, error) {
	endpoint, tokenFile := o.cloudEndpoint, o.cloudToken
	if o.cloudDataDir != "" {
		if endpoint != "" {
			return nil, fmt.Errorf("give --cloud-data-dir or --cloud-endpoint, not both")
		}
		b, err := os.ReadFile(filepath.Join(o.cloudDataDir, "endpoint"))
		if err != nil {
			return nil, fmt.Errorf("--cloud-data-dir: %w (is the local cloud running?)", err)
		}
		endpoint, tokenFile = strings.TrimSpace(string(b)), filepath.Join(o.cloudDataDir, "token")
	}
	if endpoint == "" {
		if tokenFile != "" {
			return nil, fmt.Errorf("--cloud-token-file needs --cloud-endpoint")
		}
		return nil, nil
	}
	if _, err := url.Parse(endpoint); err != nil {
		return nil, fmt.Errorf("local cloud endpoint %q: %w", endpoint, err)
	}
	token := ""
	if tokenFile != "" {
		tok, err := client.ReadTokenFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("local cloud token: %w", err)
		}
		token = tok
	}
	return client.New(endpoint, token), nil
}

// runCapabilities: --capabilities as given, else what --cloud-provider
// reports plus what the run's other flags make possible.
func runCapabilities(ctx context.Context, o *conformanceOptions, env *conformance.Env) (map[conformance.Capability]bool, error) {
	if o.capabilities != "" {
		if o.extraCapabilities != "" {
			return nil, fmt.Errorf("--extra-capabilities adds to what --cloud-provider reports: with --capabilities, list them all there")
		}
		return conformance.ParseCapabilities(o.capabilities)
	}
	if o.cloudProvider == "" {
		return nil, fmt.Errorf("say what the provider supports: give --capabilities (comma separated: %s; or all), "+
			"or --cloud-provider (and --cloud-config) of a Portside provider to discover them", strings.Join(capabilityNames(), ","))
	}
	p, err := cloud.New(ctx, o.cloudProvider, o.cloudConfig)
	if err != nil {
		return nil, fmt.Errorf("--cloud-provider %s: %w", o.cloudProvider, err)
	}
	if env.ProviderName == "" {
		env.ProviderName = p.ProviderName()
	}
	caps := conformance.CapabilitiesFromProvider(cloud.Discover(p))
	// The kubelet-to-apiserver path is every cluster's: through the
	// network proxy when there is one, directly otherwise.
	caps[conformance.NetworkProxy] = true
	if env.Cloud != nil || len(env.InstanceHook) > 0 {
		caps[conformance.InstanceDeletion] = true
	}
	if o.cloudDataDir != "" && caps[conformance.LoadBalancers] {
		// A local cloud on this machine serves its VIPs here.
		caps[conformance.LBReachable] = true
	}
	if o.extraCapabilities != "" {
		extra, err := conformance.ParseCapabilities(o.extraCapabilities)
		if err != nil {
			return nil, fmt.Errorf("--extra-capabilities: %w", err)
		}
		for c := range extra {
			caps[c] = true
		}
	}
	return caps, nil
}

// providerNameFromNodes is the providerID scheme of the first Node that
// has one, or "".
func providerNameFromNodes(ctx context.Context, c kubernetes.Interface) string {
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, n := range nodes.Items {
		if scheme, _, ok := strings.Cut(n.Spec.ProviderID, "://"); ok && scheme != "" {
			return scheme
		}
	}
	return ""
}

func writeJUnitFile(path string, results []conformance.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	if err := conformance.WriteJUnit(f, "portside-conformance", results); err != nil {
		_ = f.Close()
		return fmt.Errorf("--junit: %w", err)
	}
	return f.Close()
}

func conformanceCleanup(ctx context.Context, w io.Writer, env *conformance.Env) error {
	removed, err := conformance.Cleanup(ctx, env)
	for _, r := range removed {
		fmt.Fprintln(w, "deleted", r)
	}
	if err == nil && len(removed) == 0 {
		fmt.Fprintln(w, "nothing to clean up")
	}
	return err
}
