package agent

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// TestLeaseFlags: upstream's lease flags parse into the agent's options;
// the deprecated --lease-label is --lease-label-selector; bad values are
// refused naming the flag.
func TestLeaseFlags(t *testing.T) {
	parse := func(args ...string) (Options, error) {
		f := NewFlags()
		fs := pflag.NewFlagSet("proxy-agent", pflag.ContinueOnError)
		f.AddFlags(fs)
		if err := fs.Parse(append([]string{"--portside-plaintext"}, args...)); err != nil {
			return Options{}, err
		}
		return f.Options(fs, logr.Discard())
	}
	o, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if o.CountServerLeases || o.LeaseNamespace != "kube-system" || o.LeaseSelector.String() != "k8s-app=konnectivity-server" || o.ServerCountSource != "default" {
		t.Errorf("defaults = %v %q %q %q, want upstream's", o.CountServerLeases, o.LeaseNamespace, o.LeaseSelector, o.ServerCountSource)
	}
	o, err = parse("--lease-label=app in (a,b),tier!=x", "--server-count-source=max", "--lease-namespace=proxy")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.LeaseSelector.String(); got != "app in (a,b),tier!=x" || o.ServerCountSource != "max" || o.LeaseNamespace != "proxy" {
		t.Errorf("selector %q source %q namespace %q", got, o.ServerCountSource, o.LeaseNamespace)
	}
	for args, want := range map[string]string{
		"--lease-label-selector=a=b=c":                               "lease-label-selector",
		"--server-count-source=leases":                               "--server-count-source",
		"--count-server-leases --kubeconfig=/nonexistent/kubeconfig": "--kubeconfig",
	} {
		if _, err := parse(strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one naming %s", args, err, want)
		}
	}
}
