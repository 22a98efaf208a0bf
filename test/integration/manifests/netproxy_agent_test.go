package manifests

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/netproxy/agent"
)

// TestProxyAgentHealthOnLoopback: the shipped agent DaemonSet binds its
// health and metrics server to loopback only, so nothing off the node (or
// in another pod) reads its metrics, and probes it with the exec probe
// `portside proxy-agent probe` that reaches loopback from inside the pod:
// run against an agent started from the manifest's own flags, the probe
// passes, the agent's port is closed on the host's other addresses, and
// the probe fails once the agent is gone. Its rolling update surges, with
// a grace period for the agent's drain.
func TestProxyAgentHealthOnLoopback(t *testing.T) {
	ds := &appsv1.DaemonSet{}
	decodeOne(t, filepath.Join(netproxyDeployDir, "proxy-agent.yaml"), ds)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if v := flagValue(c.Command, "--health-server-host"); !isLoopback(v) {
		t.Fatalf("proxy-agent --health-server-host=%q, want a loopback address (empty binds the pod IP)", v)
	}
	if c.StartupProbe != nil {
		t.Errorf("proxy-agent has a startup probe %+v", c.StartupProbe)
	}
	// Readiness: the same exec probe of /readyz (connected to a server).
	rp := c.ReadinessProbe
	if rp == nil || rp.Exec == nil || rp.HTTPGet != nil || rp.TCPSocket != nil || rp.GRPC != nil {
		t.Fatalf("proxy-agent readiness probe %+v, want an exec probe of /readyz (a new agent counts as ready once connected)", rp)
	}
	readyURL, err := url.Parse(flagValue(rp.Exec.Command, "--url"))
	if err != nil || !isLoopback(readyURL.Hostname()) || readyURL.Port() != flagValue(c.Command, "--health-server-port") || readyURL.Path != "/readyz" {
		t.Fatalf("readiness probe --url=%q, want the agent's loopback /readyz (%v)", flagValue(rp.Exec.Command, "--url"), err)
	}
	lp := c.LivenessProbe
	if lp == nil || lp.Exec == nil || lp.HTTPGet != nil || lp.TCPSocket != nil || lp.GRPC != nil {
		t.Fatalf("proxy-agent liveness probe %+v, want an exec probe (the kubelet's network probes go to the pod IP)", lp)
	}
	probe := lp.Exec.Command
	if len(probe) < 3 || probe[0] != "/portside" || probe[1] != "proxy-agent" || probe[2] != "probe" {
		t.Fatalf("liveness probe runs %q, want /portside proxy-agent probe", probe)
	}
	probeURL, err := url.Parse(flagValue(probe, "--url"))
	if err != nil || !isLoopback(probeURL.Hostname()) || probeURL.Port() != flagValue(c.Command, "--health-server-port") {
		t.Fatalf("liveness probe --url=%q, want the agent's loopback health port %s (%v)", flagValue(probe, "--url"), flagValue(c.Command, "--health-server-port"), err)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.String() == "0" ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("rolling update %+v, want maxSurge > 0 and maxUnavailable 0 (a new agent beside the draining one)", ru)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 60 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least 60 for the agent's drain", g)
	}

	// The agent as the manifest configures it, on a free port and with no
	// server to reach.
	f := agent.NewFlags()
	fs := pflag.NewFlagSet("proxy-agent", pflag.ContinueOnError)
	f.AddFlags(fs)
	// Port 0 disables the server: a port free a moment ago instead.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	args := append(append([]string{}, c.Command[2:]...), "--health-server-port="+strconv.Itoa(free), "--admin-server-port=0",
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=1", "--portside-plaintext")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	o, err := f.Options(fs, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	stop := func() { cancel(); <-done }
	defer stop()
	port := a.HealthAddr().(*net.TCPAddr).Port
	if ip := a.HealthAddr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("the agent's health server listens on %v", a.HealthAddr())
	}
	probeArgs := func() []string {
		u := *probeURL
		u.Host = net.JoinHostPort(probeURL.Hostname(), strconv.Itoa(port))
		out := []string{}
		for _, arg := range probe[1:] {
			if strings.HasPrefix(arg, "--url=") {
				arg = "--url=" + u.String()
			}
			out = append(out, arg)
		}
		return out
	}
	if err := runCLI(probeArgs()); err != nil {
		t.Fatalf("the manifest's probe against a live agent: %v", err)
	}
	// Not connected to any server (there is none): not ready.
	readyArgs := []string{}
	for _, arg := range rp.Exec.Command[1:] {
		if strings.HasPrefix(arg, "--url=") {
			u := *readyURL
			u.Host = net.JoinHostPort(readyURL.Hostname(), strconv.Itoa(port))
			arg = "--url=" + u.String()
		}
		readyArgs = append(readyArgs, arg)
	}
	if err := runCLI(readyArgs); err == nil {
		t.Errorf("the manifest's readiness probe passed for an agent connected to no server")
	}
	for _, ip := range hostIPs(t) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = conn.Close()
			t.Errorf("the agent's health port answers on %s, not only loopback", ip)
		}
	}
	stop()
	if err := runCLI(probeArgs()); err == nil {
		t.Error("the probe passed with no agent running")
	}
}

func runCLI(args []string) error {
	root := cli.NewRootCommand()
	root.SetArgs(args)
	root.SilenceUsage = true
	return root.ExecuteContext(context.Background())
}

// hostIPs are this host's non-loopback unicast addresses (a pod IP's
// stand-in).
func hostIPs(t *testing.T) []net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.IsGlobalUnicast() {
			out = append(out, n.IP)
		}
	}
	return out
}
