package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/proc"
)

// SystemCgroup is the child cgroup the machine's own daemons (its init,
// containerd, kubelet) run in; kubelet puts pods beside it, under the
// machine's cgroup (its cgroupRoot).
const SystemCgroup = "system"

// Config is one machine.
type Config struct {
	// Name is the instance's name; ID its cloud ID (a cgroup and namespace
	// name part: unique among the cloud's machines).
	Name, ID string
	// Index numbers its VPC link.
	Index int
	// Addr is its address in the VPC; Addr6 its IPv6 one in a dual-stack
	// VPC (invalid: none).
	Addr, Addr6 netip.Addr
	// Dir is its own directory (state, disks, logs).
	Dir string
}

// Machine is a sandbox that exists (powered on or off).
type Machine struct {
	cfg Config
	nw  *vpc.Network
	cg  *cgroups
	st  *state
	p   *proc.Process
}

// state is what a machine made, kept in <dir>/machine.json so that Destroy
// works from the record alone (after a kill -9 of the cloud).
type state struct {
	path string
	// Netns is the machine's namespace name and its inode once made.
	Netns      string `json:"netns"`
	NetnsInode uint64 `json:"netnsInode,omitempty"`
	// CgroupPath is the machine's cgroup path; Mounts the hierarchies it
	// is made in. Parents made above it are shared with other machines
	// and carry ParentMarker instead of an entry here.
	CgroupPath string   `json:"cgroupPath"`
	Mounts     []string `json:"mounts"`
	// Init is the machine's init while it runs.
	Init *proc.Identity `json:"init,omitempty"`
}

func (s *state) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

func statePath(dir string) string { return filepath.Join(dir, "machine.json") }

// Create makes the sandbox: namespace, VPC link, cgroups. It does not boot
// it (see Start).
func Create(ctx context.Context, nw *vpc.Network, cfg Config) (*Machine, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := Destroy(ctx, cfg.Dir); err != nil {
		return nil, fmt.Errorf("machine %s: removing what an earlier run left: %w", cfg.Name, err)
	}
	cg, err := discover("ps-" + cfg.ID)
	if err != nil {
		return nil, err
	}
	st := &state{path: statePath(cfg.Dir), Netns: "ps-" + cfg.ID, CgroupPath: cg.path}
	for _, h := range cg.hs {
		st.Mounts = append(st.Mounts, h.Mount)
	}
	m := &Machine{cfg: cfg, nw: nw, cg: cg, st: st}
	if err := m.build(); err != nil {
		return nil, errors.Join(err, Destroy(context.Background(), cfg.Dir))
	}
	klog.FromContext(ctx).V(2).Info("Machine created", "machine", cfg.Name, "netns", st.Netns, "cgroup", cg.path, "address", cfg.Addr)
	return m, nil
}

func (m *Machine) build() error {
	if err := m.st.save(); err != nil {
		return err
	}
	if out, err := exec.Command("ip", "netns", "add", m.st.Netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", m.st.Netns, err, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(vpc.NetnsPath(m.st.Netns), &st); err != nil {
		return err
	}
	m.st.NetnsInode = st.Ino
	if err := m.st.save(); err != nil {
		return err
	}
	if err := m.nw.Attach(m.cfg.Index, m.st.Netns, m.cfg.Addr); err != nil {
		return err
	}
	if m.cfg.Addr6.IsValid() {
		if err := m.nw.Attach6(m.st.Netns, m.cfg.Addr6); err != nil {
			return err
		}
	}
	return m.cg.create(SystemCgroup)
}

// Netns is the machine's network namespace path.
func (m *Machine) Netns() string { return vpc.NetnsPath(m.st.Netns) }

// CgroupPath is the machine's cgroup (kubelet's cgroupRoot).
func (m *Machine) CgroupPath() string { return m.cg.path }

// SystemProcsFiles are the cgroup.procs files the machine's init joins.
func (m *Machine) SystemProcsFiles() []string { return m.cg.procsFiles(SystemCgroup) }

// Addr is the machine's VPC address.
func (m *Machine) Addr() netip.Addr { return m.cfg.Addr }

// Addr6 is the machine's IPv6 VPC address (invalid: none).
func (m *Machine) Addr6() netip.Addr { return m.cfg.Addr6 }

// Running reports whether the machine's init runs.
func (m *Machine) Running() bool {
	if m.p == nil {
		return false
	}
	select {
	case <-m.p.Done():
		return false
	default:
		return true
	}
}

// Start powers the machine on: its init runs in the machine's network
// namespace and a private mount namespace (mounts made inside never reach
// the host; `ip netns exec` is not used because it remounts /sys and hides
// the cgroup hierarchies). The init must join SystemProcsFiles first.
func (m *Machine) Start(argv, env []string, logPath string) error {
	if m.Running() {
		return fmt.Errorf("machine %s is already running", m.cfg.Name)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("nsenter not found (util-linux): %w", err)
	}
	args := append([]string{"--net=" + m.Netns(), "--", "unshare", "--mount", "--propagation", "slave", "--"}, argv...)
	p, err := proc.Start(m.cfg.Name, nsenter, args, env, logPath)
	if err != nil {
		return err
	}
	m.p = p
	if id, err := proc.Lookup(p.PID()); err == nil {
		m.st.Init = &id
		_ = m.st.save()
	}
	return nil
}

// Init is the running init process (nil when off).
func (m *Machine) Init() *proc.Process { return m.p }

// Stop powers the machine off: its init gets SIGTERM and grace to stop
// its daemons, then every process left in its cgroups is killed. The disk
// (Dir) stays, as a stopped instance's does.
func (m *Machine) Stop(grace time.Duration) error {
	if m.p != nil {
		m.p.Stop(grace)
		m.p = nil
	}
	m.st.Init = nil
	_ = m.st.save()
	return m.cg.killAll(30 * time.Second)
}

// Delete powers off and removes the sandbox (namespace, link, cgroups);
// the directory is removed too.
func (m *Machine) Delete(ctx context.Context, grace time.Duration) error {
	if err := m.Stop(grace); err != nil {
		return err
	}
	if err := m.nw.Detach(m.cfg.Index); err != nil {
		return err
	}
	if err := Destroy(ctx, m.cfg.Dir); err != nil {
		return err
	}
	return os.RemoveAll(m.cfg.Dir)
}
