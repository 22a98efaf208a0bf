// Package devenv implements `portside up`, `portside down` and `portside
// status`: it starts the parts of a local Portside environment in order
// (control plane, local cloud, simulated nodes, CCM), reports progress,
// shows a request through a LoadBalancer VIP, and stops everything it
// started, by PID, on exit or on any start-up failure.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/portside-io/portside/internal/localcloud/hypervisor"
	"github.com/portside-io/portside/internal/proc"
)

// Options configure `portside up`.
type Options struct {
	// DataDir keeps the environment's state between runs.
	DataDir string
	// Nodes is the number of nodes, 1 to MaxNodes (MaxRealNodes real).
	Nodes int
	// Zones is how many of the local cloud's zones the nodes are spread
	// over, round-robin (0: DefaultZones, or fewer with fewer nodes).
	Zones int
	// Once verifies the environment (a request through a LoadBalancer VIP)
	// and stops, for scripts and tests.
	Once bool
	// Purge removes DataDir when the environment stops.
	Purge bool
	// CCMReplicas is the number of CCMs, 1 to MaxCCMReplicas; more than one
	// run with leader election, as a highly available CCM does.
	CCMReplicas int
	// NetworkProxy sends kube-apiserver's cluster egress through Portside's
	// network proxy: proxy-server beside it, one proxy-agent per zone.
	NetworkProxy bool
	// CCMBinary, when set, runs this cloud-controller-manager instead of
	// `portside ccm`, with upstream's flags (e.g. upstream's own, built with
	// the local provider: test/upstreamccm); it serves no webhooks.
	CCMBinary string
	// NetworkProxyBinaries, when set, is a directory whose proxy-server and
	// proxy-agent run instead of Portside's, with upstream's flags only
	// (upstream apiserver-network-proxy's, as `make tools` builds them):
	// for measuring the two side by side on the same cluster
	// (BenchmarkUpRealNodesKubectlStreams). Upstream's server trusts the
	// identity an agent claims, so this is for comparison, not for use.
	NetworkProxyBinaries string
	// ConsoleReadWrite makes the printed console link read-write (faults can
	// be set from the page); by default it is read-only, as a link in a
	// terminal's scrollback or a shared screen should be.
	ConsoleReadWrite bool
	// NodeMode is NodeModeSimulated ("" too: library callers and tests
	// that measure scale), NodeModeReal (real machines of the local cloud
	// running containerd, kubelet and kube-proxy; root only) or
	// NodeModeAuto (the CLI's default: real where the machine allows it).
	NodeMode string
	// Install is how the CCM runs: InstallHost ("" too) as `up`'s child
	// processes, InstallChart as the Helm chart's pods on the real nodes
	// (the image pushed to the cloud's registry first), InstallManifests
	// as deploy/ccm's pods, applied with kubectl.
	Install string
	// IPFamily is IPFamilyIPv4 ("" too) or IPFamilyDual (real nodes).
	IPFamily string
	// Out receives progress lines.
	Out io.Writer
}

// MaxNodes bounds --nodes: the node address range of one environment is a /22.
const MaxNodes = 1000

// MaxRealNodes bounds --nodes for real machines: each runs containerd,
// kubelet and kube-proxy (about 200 MB and 2% of a core idle), and their
// subnet is a /24.
const MaxRealNodes = 50

// MaxCCMReplicas bounds --ccm-replicas.
const MaxCCMReplicas = 5

// Up starts the environment and blocks until ctx is done (or, with Once,
// until it has shown a request through a LoadBalancer VIP). Whatever fails,
// everything started so far is stopped before Up returns.
func Up(ctx context.Context, opts Options) (err error) {
	if opts.Nodes < 1 || opts.Nodes > MaxNodes {
		return fmt.Errorf("--nodes %d is out of range 1-%d", opts.Nodes, MaxNodes)
	}
	// The cloud's zones are known once it runs (chooseZones checks them
	// then); what --nodes allows is checked now, before anything starts.
	if opts.Zones < 0 {
		return fmt.Errorf("--zones %d: give the number of zones to spread the nodes over, 1 or more (default %d)", opts.Zones, DefaultZones)
	}
	if opts.Zones > opts.Nodes {
		return fmt.Errorf("--zones %d with --nodes %d would leave a zone without nodes: give --nodes %d or more, or fewer --zones", opts.Zones, opts.Nodes, opts.Zones)
	}
	if opts.CCMReplicas == 0 {
		opts.CCMReplicas = 1
	}
	if opts.CCMReplicas < 1 || opts.CCMReplicas > MaxCCMReplicas {
		return fmt.Errorf("--ccm-replicas %d is out of range 1-%d", opts.CCMReplicas, MaxCCMReplicas)
	}
	unavailable := ""
	if opts.NodeMode == NodeModeAuto || opts.NodeMode == NodeModeReal {
		unavailable = realNodesUnavailable()
	}
	mode, note, err := chooseNodeMode(opts.NodeMode, opts.Nodes, unavailable)
	if err != nil {
		return err
	}
	if err := checkInstall(opts.Install, mode, opts.CCMBinary); err != nil {
		return err
	}
	if err := checkIPFamily(opts.IPFamily, mode); err != nil {
		return err
	}
	if err := checkNetworkProxyBinaries(opts.NetworkProxyBinaries, opts.NetworkProxy, opts.Install); err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintln(opts.Out, note)
	}
	opts.NodeMode = mode
	l, err := newLayout(opts.DataDir)
	if err != nil {
		return err
	}
	// A garbage pid file is overwritten: only Down signals what it names.
	if st, _ := checkUp(l.pidFile(), proc.Lookup); st.running {
		return fmt.Errorf("portside up is already running with data directory %s (pid %d): run `portside down --data-dir %s` first", l.dir, st.rec.PID, opts.DataDir)
	}
	if err := writePIDFile(l.pidFile()); err != nil {
		return err
	}
	defer func() { _ = os.Remove(l.pidFile()) }()

	p := &progress{w: opts.Out, start: time.Now()}
	s := &stack{p: p}
	defer func() {
		s.stopAll()
		if opts.NodeMode == NodeModeReal {
			removeMachines(context.WithoutCancel(ctx), p, l)
		}
		if opts.Purge {
			msg, err := removeDataDir(l.dir)
			if err != nil {
				msg = err.Error()
			}
			p.step("shutdown", "%s", msg)
		} else {
			p.step("shutdown", "state kept in %s (remove it with `portside down --purge`)", l.dir)
		}
		// Last: the machines' networks are gone, so another environment
		// may choose these addresses now.
		s.releaseClaims()
	}()

	env, part, err := start(ctx, s, l, opts)
	if err == nil && installRunsCCM(opts.Install) {
		part, err = "demo", demo(ctx, p, env, opts.Once)
	}
	if err != nil {
		p.step("failed", "%s did not start; stopping everything started so far", part)
		return err
	}
	p.step("ready", "use the cluster with:\n\n    export KUBECONFIG=%s\n    %s get nodes -L topology.kubernetes.io/zone\n    %s status --data-dir %s\n\n  logs: %s, %s",
		l.kubeconfig(), kubectlName(env.kubectl), selfName(), opts.DataDir, l.logs(), filepath.Join(l.controlPlane(), "logs"))
	consoleLink(ctx, p, env, opts.ConsoleReadWrite)
	if opts.Once {
		return nil
	}
	p.step("ready", "press Ctrl-C or run `portside down` to stop")
	select {
	case <-ctx.Done():
	case <-s.exited():
		// Only the control plane is fatal: the other parts are supervised,
		// and restarting an apiserver or etcd behind the user's back would
		// hide what killed it.
		return fmt.Errorf("%s: the control plane is not restarted, so the environment stops (its state is kept: run `%s up` again); logs in %s",
			env.controlPlaneExit(), selfName(), filepath.Join(l.controlPlane(), "logs"))
	}
	return nil
}

// start brings the parts up in order; each one it starts is pushed on s.
// On failure it returns the part that failed.
func start(ctx context.Context, s *stack, l layout, opts Options) (*environment, string, error) {
	env := &environment{layout: l, ccmReplicas: opts.CCMReplicas, networkProxy: opts.NetworkProxy, ccmBinary: opts.CCMBinary,
		netproxyBinaries: opts.NetworkProxyBinaries,
		realNodes:        opts.NodeMode == NodeModeReal, install: opts.Install, dual: opts.IPFamily == IPFamilyDual,
		ipv6Only: opts.IPFamily == IPFamilyIPv6}
	nodes := startNodes(opts.Nodes, opts.Zones)
	if env.realNodes {
		var err error
		var claims []*claim
		if env.realNet, claims, err = loadRealNetwork(l); err != nil {
			return nil, "nodes", err
		}
		for _, c := range claims {
			s.hold(c)
		}
		if env.vpc6() {
			if err := ensureRealNetwork6(l, &env.realNet); err != nil {
				return nil, "nodes", err
			}
		}
		nodes = startRealNodes(opts.Nodes, opts.Zones)
	}
	ccm := startCCM
	switch opts.Install {
	case InstallChart:
		ccm = installChart
	case InstallManifests:
		ccm = installManifests
	case InstallPrepare:
		ccm = prepareChart
	}
	type step struct {
		part string
		fn   func(context.Context, *stack, *environment) error
	}
	steps := []step{
		{"control plane", startControlPlane},
		{"local cloud", startCloud},
		{"registry", setupRegistry},
		{"kube-controller-manager", startKCM},
		{"kube-scheduler", startScheduler},
		{"nodes", nodes},
		{"ccm", ccm},
	}
	if installRunsCCM(opts.Install) {
		steps = append(steps, step{"nodes", waitNodesInitialized})
	}
	if opts.NetworkProxy {
		steps = slices.Insert(steps, 1, step{"network proxy", startNetworkProxyServer})
		// The agents run on the nodes, before the CCM.
		ccm := slices.IndexFunc(steps, func(st step) bool { return st.part == "ccm" })
		steps = slices.Insert(steps, ccm, step{"network proxy", startNetworkProxyAgents})
	} else {
		_ = os.Remove(l.netproxyStateFile()) // an earlier run's
	}
	if env.realNodes {
		// Pods reach kube-apiserver by the kubernetes Service from the
		// first: the chart's CCM pods (--install=chart) before any node is
		// initialized. Other pods need initialized nodes (taint removed,
		// routes); CoreDNS, the first of them, reads the API by the Service.
		ccm := slices.IndexFunc(steps, func(st step) bool { return st.part == "ccm" })
		steps = slices.Insert(steps, ccm, step{"control plane", publishAPIServerEndpoint})
		if installRunsCCM(opts.Install) {
			steps = append(steps, step{"cluster DNS", startClusterDNS})
		}
	}
	for _, st := range steps {
		if err := st.fn(ctx, s, env); err != nil {
			if ctx.Err() != nil {
				return nil, st.part, fmt.Errorf("%s: interrupted while starting", st.part)
			}
			return nil, st.part, fmt.Errorf("%s: %w", st.part, err)
		}
	}
	return env, "", nil
}

// Down stops a running `portside up` that uses dataDir and waits for it to
// exit. It signals only the very process that wrote the pid file.
func Down(ctx context.Context, dataDir string, purge bool, out io.Writer) error {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	pidFile := layout{dir: dir}.pidFile()
	st, err := checkUp(pidFile, proc.Lookup)
	if err != nil {
		return fmt.Errorf("%w: not signalling anything; if no portside up uses %s, remove the pid file", err, dir)
	}
	switch {
	case st.running:
		if err := stopUp(ctx, st, out); err != nil {
			return err
		}
	case st.stale != "":
		fmt.Fprintf(out, "%s: not signalling it; removing the stale pid file %s\n", st.stale, pidFile)
		if err := os.Remove(pidFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	default:
		fmt.Fprintf(out, "no portside up is running with data directory %s\n", dataDir)
	}
	// Real machines of an `up` that was killed (kill -9): their sandboxes
	// and the VPC, by the cloud's records.
	if err := hypervisor.Down(ctx, layout{dir: dir}.machines()); err != nil {
		return fmt.Errorf("removing the real machines an earlier run left: %w", err)
	}
	if purge {
		msg, err := removeDataDir(dir)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, msg)
	}
	return nil
}

// stopUp sends SIGTERM to the verified `up` and waits until it is gone.
func stopUp(ctx context.Context, st upState, out io.Writer) error {
	pid := st.rec.PID
	// A pidfd (Go opens one on Linux) keeps naming this process even if it
	// exits and its PID is reused before the signal.
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer func() { _ = p.Release() }()
	if cur, err := proc.Lookup(pid); err != nil || !cur.Same(st.cur) {
		fmt.Fprintf(out, "portside up (pid %d) exited meanwhile\n", pid)
		return nil
	}
	fmt.Fprintf(out, "stopping portside up (pid %d)\n", pid)
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal pid %d: %w", pid, err)
	}
	for {
		if cur, err := proc.Lookup(pid); err != nil || !cur.Same(st.cur) {
			fmt.Fprintln(out, "stopped")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("portside up (pid %d) did not stop: %w", pid, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errExited is returned by waits that see a child die during start-up.
var errExited = errors.New("exited during start-up")

// consoleLink prints a one-time login link to the cloud's web console,
// read-only unless readWrite.
func consoleLink(ctx context.Context, p *progress, env *environment, readWrite bool) {
	link, _, err := env.cloudClient.ConsoleTicket(ctx, !readWrite)
	if err != nil {
		p.step("ready", "web console: %s/console/ (no one-time link: %v)", env.cloudEndpoint, err)
		return
	}
	if readWrite {
		p.step("ready", "web console: %s\n  (a one-time link, read-write; `%s cloud console --data-dir %s` prints another)",
			link, selfName(), env.cloud())
		return
	}
	p.step("ready", "web console: %s\n  (a one-time link, read-only; `%s cloud console --data-dir %s` prints a read-write one, or start with --console-read-write)",
		link, selfName(), env.cloud())
}
