package realnode

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"golang.org/x/sys/unix"

	"github.com/portside-io/portside/internal/proc"
)

// Boot is the machine's init: it runs inside the machine's network and
// (private) mount namespaces, joins the machine's cgroups, gives the
// daemons the machine's own paths, starts containerd, kubelet and
// kube-proxy, restarts whichever exits (as a machine's service manager
// does) and stops them on SIGTERM, kubelet first.
func Boot(ctx context.Context, c *BootConfig) error {
	logger := klog.FromContext(ctx).WithValues("node", c.NodeName)
	// First: join the machine's cgroups, so every daemon and container
	// started from here is the machine's.
	for _, f := range c.JoinCgroups {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("joining the machine's cgroup %s: %w", f, err)
		}
	}
	l := layout{dir: c.Dir}
	// A machine's /run is a tmpfs: empty at every boot, so no daemon finds
	// the sockets and state of its last run.
	if err := os.RemoveAll(filepath.Join(c.Dir, "run")); err != nil {
		return err
	}
	if err := render(c, l); err != nil {
		return err
	}
	if err := mountMachinePaths(l, append(hostPaths(c), c.ProxyAgent.paths()...)); err != nil {
		return err
	}
	// Pods route through the machine: forwarding in its own namespace.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("switching on forwarding in the machine: %w", err)
	}
	env := []string{
		"PATH=" + strings.Join(uniq(filepath.Dir(c.Bin.Shim), filepath.Dir(c.Bin.Runc), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"), ":"),
		"TMPDIR=" + filepath.Join(c.Dir, "tmp"),
	}
	daemons := []*daemon{
		{name: "containerd", path: c.Bin.Containerd, args: []string{"--config", l.etc("containerd.toml")}, ready: socketReady(ContainerdSocket)},
		{name: "kubelet", path: c.Bin.Kubelet, args: kubeletArgs(c, l)},
		{name: "kube-proxy", path: c.Bin.KubeProxy, args: []string{"--config=" + l.etc("kube-proxy.yaml"), fmt.Sprintf("--v=%d", c.Verbosity)}},
	}
	// The network proxy's agent last: it needs nothing of the others, and
	// stopping first it tells the server to drain before kubelet goes.
	if c.ProxyAgent != nil {
		daemons = append(daemons, &daemon{name: "proxy-agent", path: c.ProxyAgent.Bin, args: agentArgs(c)})
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	for _, d := range daemons {
		d.env, d.log = env, l.log(d.name+".log")
		if err := d.start(); err != nil {
			stopAll(daemons)
			return err
		}
		if d.ready != nil {
			if err := d.waitReady(30*time.Second, sigs); err != nil {
				stopAll(daemons)
				return err
			}
		}
		logger.Info("Started", "daemon", d.name, "pid", d.p.PID(), "log", d.log)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-sigs:
			logger.Info("Stopping the machine's daemons", "signal", s.String())
			stopAll(daemons)
			return nil
		case <-ctx.Done():
			stopAll(daemons)
			return ctx.Err()
		case <-tick.C:
			for _, d := range daemons {
				d.restartIfExited(logger)
			}
		}
	}
}

// agentArgs are the node's proxy-agent's flags: its ID and identifiers
// are the node's name and address, and it serves its health where the host
// reaches it through the VPC (the node's address), its admin port on the
// machine's loopback only.
func agentArgs(c *BootConfig) []string {
	a := c.ProxyAgent
	host, port, _ := net.SplitHostPort(a.Server)
	health := a.HealthPort
	if health == 0 {
		health = DefaultAgentHealthPort
	}
	ids := url.Values{"host": {c.NodeName}}
	if ip, err := netip.ParseAddr(c.NodeIP); err == nil && ip.Is4() {
		ids.Set("ipv4", c.NodeIP)
	} else {
		ids.Set("ipv6", c.NodeIP)
	}
	args := []string{"--proxy-server-host=" + host, "--proxy-server-port=" + port,
		"--agent-id=" + c.NodeName, "--agent-identifiers=" + ids.Encode(),
		"--ca-cert=" + a.CAFile, "--agent-cert=" + a.CertFile, "--agent-key=" + a.KeyFile,
		"--health-server-host=" + c.NodeIP, "--health-server-port=" + strconv.Itoa(health),
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(health+1),
		fmt.Sprintf("--v=%d", c.Verbosity),
	}
	if a.Upstream {
		// Upstream's agent has no drain to shorten and no subcommand.
		return args
	}
	// Its tunnels get a moment when the machine stops, not the open-ended
	// drain of a rolling restart: a powered-off machine's connections end
	// anyway.
	return append(append([]string{"proxy-agent"}, args...), "--drain-timeout=1s")
}

// paths are the host directories the agent needs inside the machine (nil
// without an agent).
func (a *ProxyAgent) paths() []string {
	if a == nil {
		return nil
	}
	return []string{filepath.Dir(a.Bin), filepath.Dir(a.CAFile), filepath.Dir(a.CertFile), filepath.Dir(a.KeyFile)}
}

// mountMachinePaths binds the machine's own directories over /var/lib,
// /var/log and /run, and shows kubelet the kernel settings it expects,
// read-only, over /proc/sys: all inside the machine's mount namespace,
// which the host never sees (propagation is slave: host mounts come in,
// none go out).
func mountMachinePaths(l layout, keep []string) error {
	// Host directories the daemons need (their binaries, the machine's own
	// directory, files the user data names) that lie under a path about to
	// become the machine's own are held open, then bound back at the same
	// path inside the machine's directories: a checkout or data directory
	// under /var/lib works as well as one anywhere else.
	var held []*os.File
	defer func() {
		for _, f := range held {
			_ = f.Close()
		}
	}()
	for _, d := range hidden(keep) {
		f, err := os.OpenFile(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s, which the machine needs: %w", d, err)
		}
		held = append(held, f)
	}
	for _, r := range l.rebinds() {
		if err := syscall.Mount(r[0], r[1], "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s over %s: %w", r[0], r[1], err)
		}
	}
	for _, f := range held {
		if err := os.MkdirAll(f.Name(), 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), f.Name(), "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s back inside the machine: %w", f.Name(), err)
		}
	}
	for k := range kernelDefaults {
		src := filepath.Join(l.dir, "sysctl", strings.ReplaceAll(k, "/", "."))
		dst := filepath.Join("/proc/sys", k)
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("showing %s inside the machine: %w", dst, err)
		}
		if err := syscall.Mount("", dst, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only inside the machine: %w", dst, err)
		}
	}
	return nil
}

// daemon is one of the machine's services.
type daemon struct {
	name, path string
	args, env  []string
	log        string
	ready      func() bool
	p          *proc.Process
	restarts   int
	nextStart  time.Time
}

func (d *daemon) start() error {
	p, err := proc.Start(d.name, d.path, d.args, d.env, d.log)
	if err != nil {
		return err
	}
	d.p = p
	return nil
}

func (d *daemon) waitReady(timeout time.Duration, sigs <-chan os.Signal) error {
	deadline := time.After(timeout)
	for !d.ready() {
		select {
		case <-d.p.Done():
			return fmt.Errorf("%s exited while starting: %v\n%s", d.name, d.p.ExitErr(), d.p.LogTail(15))
		case <-deadline:
			return fmt.Errorf("%s not ready within %v\n%s", d.name, timeout, d.p.LogTail(15))
		case s := <-sigs:
			return fmt.Errorf("%s: %v while starting", d.name, s)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// restartIfExited restarts an exited daemon with a backoff doubling from
// 1 s to 30 s, as a service manager would.
func (d *daemon) restartIfExited(logger klog.Logger) {
	select {
	case <-d.p.Done():
	default:
		return
	}
	now := time.Now()
	if d.nextStart.IsZero() {
		backoff := min(30*time.Second, time.Second<<min(d.restarts, 5))
		d.nextStart = now.Add(backoff)
		logger.Info("Daemon exited; restarting", "daemon", d.name, "err", d.p.ExitErr(), "in", backoff)
		return
	}
	if now.Before(d.nextStart) {
		return
	}
	d.nextStart = time.Time{}
	d.restarts++
	if err := d.start(); err != nil {
		logger.Error(err, "Restart failed", "daemon", d.name)
	}
}

// stopAll stops the daemons in reverse order of start: kube-proxy and
// kubelet before the runtime they use.
func stopAll(ds []*daemon) {
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].p != nil {
			ds[i].p.Stop(15 * time.Second)
		}
	}
}

func socketReady(path string) func() bool {
	return func() bool {
		c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}
}

func uniq(xs ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range xs {
		if x != "" && x != "." && !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
