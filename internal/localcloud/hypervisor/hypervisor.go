// Package hypervisor runs the local cloud's instances as real machines:
// at start it brings up the cloud's VPC (internal/localcloud/vpc); an
// instance created with user data becomes a machine sandbox
// (internal/localcloud/machine) booted with that user data, completed with
// what only the cloud knows (the instance's name and address, its disk and
// cgroups); stop, start and delete are the machine's power; the cloud's
// routes are kernel routes in the VPC router.
package hypervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/localcloud/machine"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/realnode"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Options configure the hypervisor.
type Options struct {
	// Dir holds the machines' disks (one directory per instance ID) and
	// the VPC's record.
	Dir string
	// VPC is the cloud's network (its StateFile is set from Dir if empty).
	VPC vpc.Config
	// Init is the machine init's command, to which "--config <file>" is
	// appended (default: this executable's `machine-boot`).
	Init []string
	// StopGrace is how long a powered-off machine's daemons get to stop.
	StopGrace time.Duration
	// Expose serves host services (on loopback) to the machines at the
	// VPC gateway: kube-apiserver, for one.
	Expose []Exposure
}

// Exposure is one host service served at the gateway.
type Exposure struct {
	// Port on the gateway.
	Port int
	// Target is the service's host:port on the host.
	Target string
}

// Hypervisor owns the VPC and the machines.
type Hypervisor struct {
	opts     Options
	nw       *vpc.Network
	exposed  []*vpc.Exposed
	mu       sync.Mutex
	machines map[string]*machine.Machine // by instance ID
	logger   klog.Logger
}

// Start brings the VPC up (removing what an earlier run left, by its
// record) and removes machine sandboxes an earlier run left.
func Start(ctx context.Context, opts Options) (*Hypervisor, error) {
	if opts.VPC.StateFile == "" {
		opts.VPC.StateFile = filepath.Join(opts.Dir, "vpc.json")
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 20 * time.Second
	}
	if len(opts.Init) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.Init = []string{exe, "machine-boot"}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	// Machines first: their veths live in the router the VPC removes.
	if err := destroyAll(ctx, opts.Dir); err != nil {
		return nil, err
	}
	nw, err := vpc.Up(ctx, opts.VPC)
	if err != nil {
		return nil, err
	}
	h := &Hypervisor{opts: opts, nw: nw, machines: map[string]*machine.Machine{}, logger: klog.FromContext(ctx).WithName("hypervisor")}
	for _, e := range opts.Expose {
		if _, err := h.Expose(ctx, e); err != nil {
			return nil, errors.Join(err, h.Close(ctx))
		}
	}
	return h, nil
}

// Expose serves a host service at the gateway until Close.
func (h *Hypervisor) Expose(ctx context.Context, e Exposure) (netip.AddrPort, error) {
	x, err := h.nw.Expose(ctx, e.Port, e.Target)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("serving %s at the VPC gateway port %d: %w", e.Target, e.Port, err)
	}
	h.mu.Lock()
	h.exposed = append(h.exposed, x)
	h.mu.Unlock()
	return x.Addr(), nil
}

// Down removes what a hypervisor with this directory made (after a kill
// -9 of the cloud): every machine sandbox, then the VPC.
func Down(ctx context.Context, dir string) error {
	return errors.Join(destroyAll(ctx, dir), vpc.Down(ctx, filepath.Join(dir, "vpc.json")))
}

func destroyAll(ctx context.Context, dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, machine.Destroy(ctx, filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// Network is the VPC.
func (h *Hypervisor) Network() *vpc.Network { return h.nw }

// indexOf numbers an instance's VPC link from its ID (i-%08x).
func indexOf(id string) (int, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "i-"), 16, 32)
	if err != nil || !strings.HasPrefix(id, "i-") {
		return 0, fmt.Errorf("instance ID %q is not i-<hex>", id)
	}
	return int(n), nil
}

// firstIPv4 is the instance's VPC address.
func firstIPv4(inst api.Instance) (netip.Addr, error) {
	if ip := firstInternal(inst, true); ip.IsValid() {
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("instance %s has no IPv4 address", inst.ID)
}

// firstInternal is the instance's first internal address of a family
// (invalid: none).
func firstInternal(inst api.Instance, v4 bool) netip.Addr {
	for _, a := range inst.Addresses {
		if a.Type != api.AddressInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() == v4 {
			return ip
		}
	}
	return netip.Addr{}
}

// machineAddr6 is the IPv6 address a machine gets: the instance's, in a
// dual-stack VPC; an instance with one in an IPv4-only VPC is refused, as
// its address could not be reached.
func machineAddr6(inst api.Instance, subnet6 netip.Prefix) (netip.Addr, error) {
	a := firstInternal(inst, false)
	switch {
	case !a.IsValid():
		return a, nil
	case !subnet6.IsValid():
		return netip.Addr{}, fmt.Errorf("instance %s has the IPv6 address %s, but the cloud's VPC is IPv4 only (start it with --vpc-uplink6 for a dual-stack VPC)", inst.ID, a)
	case !subnet6.Contains(a):
		return netip.Addr{}, fmt.Errorf("instance %s's IPv6 address %s is outside the VPC's IPv6 subnet %s", inst.ID, a, subnet6)
	}
	return a, nil
}

// CheckUserData parses user data as a machine's boot configuration with
// the fields only the cloud fills left out, so a bad one is refused when
// the instance is created, not when it boots.
func CheckUserData(userData string) (*realnode.BootConfig, error) {
	var c realnode.BootConfig
	dec := json.NewDecoder(strings.NewReader(userData))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("user data is not a machine boot configuration (JSON of realnode.BootConfig): %v", err)
	}
	probe := c
	probe.NodeName, probe.Dir, probe.CgroupRoot = "probe", "/probe", "/probe"
	// Addresses of both families (a documentation range, never used): an
	// IPv6-only machine without an IPv6 address is refused at boot, by
	// machineAddr6's check of the instance.
	probe.SetAddresses(netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::2"))
	if err := probe.Validate(); err != nil {
		return nil, fmt.Errorf("user data: %w", err)
	}
	return &c, nil
}

// Boot creates (if needed) and powers on the machine of inst with its
// user data.
func (h *Hypervisor) Boot(ctx context.Context, inst api.Instance, userData string) error {
	c, err := CheckUserData(userData)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.machines[inst.ID]
	if m == nil {
		idx, err := indexOf(inst.ID)
		if err != nil {
			return err
		}
		addr, err := firstIPv4(inst)
		if err != nil {
			return err
		}
		addr6, err := machineAddr6(inst, h.nw.Subnet6())
		if err != nil {
			return err
		}
		// The machine's namespace and cgroup names carry the VPC's ID: two
		// clouds on one host both have an i-00000001.
		m, err = machine.Create(ctx, h.nw, machine.Config{Name: inst.Name, ID: h.opts.VPC.ID + "-" + strings.TrimPrefix(inst.ID, "i-"), Index: idx, Addr: addr,
			Addr6: addr6, Dir: filepath.Join(h.opts.Dir, inst.ID)})
		if err != nil {
			return err
		}
		h.machines[inst.ID] = m
	}
	if m.Running() {
		return nil
	}
	c.NodeName, c.Dir = inst.Name, filepath.Join(h.opts.Dir, inst.ID)
	c.SetAddresses(m.Addr(), m.Addr6())
	c.JoinCgroups, c.CgroupRoot = m.SystemProcsFiles(), m.CgroupPath()
	if err := c.Validate(); err != nil {
		return err
	}
	boot := filepath.Join(c.Dir, "boot.json")
	if err := c.Write(boot); err != nil {
		return err
	}
	args := append(append([]string{}, h.opts.Init...), "--config", boot)
	if err := m.Start(args, nil, filepath.Join(c.Dir, "init.log")); err != nil {
		return err
	}
	h.logger.Info("Machine booted", "instance", inst.ID, "name", inst.Name, "address", m.Addr(), "pid", m.Init().PID())
	return nil
}

// PowerOff stops the machine of instance id (its disk stays).
func (h *Hypervisor) PowerOff(id string) error {
	h.mu.Lock()
	m := h.machines[id]
	h.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.Stop(h.opts.StopGrace)
}

// Delete powers off and removes the machine of instance id with its disk.
func (h *Hypervisor) Delete(ctx context.Context, id string) error {
	h.mu.Lock()
	m := h.machines[id]
	delete(h.machines, id)
	h.mu.Unlock()
	if m == nil {
		return machine.Destroy(ctx, filepath.Join(h.opts.Dir, id))
	}
	return m.Delete(ctx, h.opts.StopGrace)
}

// Close powers every machine off and removes the sandboxes and the VPC:
// the cloud stopping is the whole environment stopping. Disks stay, so
// the instances boot again with their state next time.
func (h *Hypervisor) Close(ctx context.Context) error {
	h.mu.Lock()
	ms := h.machines
	h.machines = map[string]*machine.Machine{}
	exposed := h.exposed
	h.exposed = nil
	h.mu.Unlock()
	for _, x := range exposed {
		_ = x.Close()
	}
	var wg sync.WaitGroup
	errs := make([]error, 0, len(ms))
	var emu sync.Mutex
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The environment is going: a short grace, then the cgroup
			// kill (the disks are kept; containerd's state is fsynced).
			err := m.Stop(min(h.opts.StopGrace, 3*time.Second))
			emu.Lock()
			errs = append(errs, err)
			emu.Unlock()
		}()
	}
	wg.Wait()
	errs = append(errs, Down(ctx, h.opts.Dir))
	return errors.Join(errs...)
}
