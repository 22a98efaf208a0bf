package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/hypervisor"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Real machines (Options.Machines): the store stays the truth; the
// hypervisor follows it after each committed change, and is brought in
// line with it at start (running instances booted, routes written).

func userDataKey(id string) string { return "userdata/" + id }

// checkUserData refuses user data this cloud cannot boot, before anything
// is stored.
func (s *Server) checkUserData(userData string) error {
	if userData == "" {
		return nil
	}
	if s.hv == nil {
		return invalid("userData given, but this cloud runs no real machines: start it with --machines=real")
	}
	if _, err := hypervisor.CheckUserData(userData); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func (s *Server) userData(id string) string {
	var ud string
	_ = s.store.View(func(tx *store.Tx) error {
		v, _, err := store.Get[string](tx, store.Meta, userDataKey(id))
		ud = v
		return err
	})
	return ud
}

// bootNew boots a new instance's machine; if it cannot boot, the instance
// is removed again, as a cloud whose VM fails to start does not bill it.
func (s *Server) bootNew(ctx context.Context, inst *api.Instance, userData string) error {
	err := s.hv.Boot(context.WithoutCancel(ctx), *inst, userData)
	if err == nil {
		return nil
	}
	_ = s.hv.Delete(context.WithoutCancel(ctx), inst.ID)
	_ = s.store.Update(func(tx *store.Tx) error {
		for _, a := range inst.Addresses {
			if a.Type == api.AddressInternalIP {
				_ = tx.ReleaseIP(a.Address)
			}
		}
		_ = tx.Delete(store.Meta, "instance-name/"+inst.Name)
		_ = tx.Delete(store.Meta, userDataKey(inst.ID))
		return tx.Delete(store.Instances, inst.ID)
	})
	return fmt.Errorf("instance %s could not boot (it was not kept): %w", inst.Name, err)
}

func (s *Server) deleteMachine(ctx context.Context, id string) error {
	if s.hv == nil {
		return nil
	}
	return s.hv.Delete(context.WithoutCancel(ctx), id)
}

// powerMachine applies a committed power state to the machine.
func (s *Server) powerMachine(ctx context.Context, inst api.Instance) error {
	if s.hv == nil {
		return nil
	}
	ud := s.userData(inst.ID)
	if ud == "" {
		return nil // a record-only instance
	}
	if inst.State == api.InstanceStopped {
		return s.hv.PowerOff(inst.ID)
	}
	return s.hv.Boot(context.WithoutCancel(ctx), inst, ud)
}

// routeMachines writes (or removes) a route as a kernel route in the VPC
// router: via the target instance's address.
func (s *Server) routeMachines(rt api.Route, add bool) error {
	if s.hv == nil {
		return nil
	}
	dst, err := netip.ParsePrefix(rt.DestinationCIDR)
	if err != nil {
		return err
	}
	if !add {
		return s.hv.Network().DeleteRoute(dst)
	}
	inst, ok := s.storedInstance(rt.TargetInstance)
	if !ok {
		return nil // a blackhole: nothing to route to
	}
	// Via the instance's address of the destination's family, in the
	// VPC's subnet of that family (an IPv6 route needs a dual-stack VPC).
	subnet := s.hv.Network().Subnet()
	if dst.Addr().Is6() {
		subnet = s.hv.Network().Subnet6()
	}
	for _, a := range instanceAddrs(inst) {
		if a.Is4() == dst.Addr().Is4() && subnet.IsValid() && subnet.Contains(a) {
			return s.hv.Network().SetRoute(dst, a)
		}
	}
	return nil
}

// startMachines starts the hypervisor and brings it in line with the
// store: every running instance with user data boots, every route is
// written.
func (s *Server) startMachines(ctx context.Context) error {
	hv := s.hv
	if hv == nil {
		return nil
	}
	var insts []api.Instance
	var routes []api.Route
	if err := s.store.View(func(tx *store.Tx) (err error) {
		if insts, err = store.List[api.Instance](tx, store.Instances); err != nil {
			return err
		}
		routes, err = store.List[api.Route](tx, store.Routes)
		return err
	}); err != nil {
		return err
	}
	for _, inst := range insts {
		if ud := s.userData(inst.ID); ud != "" && inst.State != api.InstanceStopped {
			if err := hv.Boot(ctx, inst, ud); err != nil {
				return fmt.Errorf("booting instance %s: %w", inst.Name, err)
			}
		}
	}
	for _, rt := range routes {
		if err := s.routeMachines(rt, true); err != nil {
			return fmt.Errorf("route %s: %w", rt.Name, err)
		}
	}
	return nil
}

// VPCRegistryPort is where machines reach the served registry: the VPC
// gateway's port 5000 (written to <data-dir>/registry-vpc-endpoint).
const VPCRegistryPort = 5000

// RegistryVPCEndpointFile holds the registry's address as machines reach it.
const RegistryVPCEndpointFile = "registry-vpc-endpoint"

// exposeRegistry serves the registry to the machines at the gateway.
func (s *Server) exposeRegistry(ctx context.Context, regHost, dataDir string) error {
	if s.hv == nil || regHost == "" {
		return nil
	}
	at, err := s.hv.Expose(ctx, hypervisor.Exposure{Port: VPCRegistryPort, Target: regHost})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dataDir, RegistryVPCEndpointFile), []byte(at.String()+"\n"), 0o644)
}

// VPCAPIPort is where machines reach the cloud's API: the VPC gateway's
// port 8780 (written to <data-dir>/vpc-endpoint as a URL). A machine's
// credential plugin asks it for registry credentials; the machines have
// their own network namespace, so the API's loopback address is not theirs.
const VPCAPIPort = 8780

// VPCEndpointFile holds the API's URL as machines reach it.
const VPCEndpointFile = "vpc-endpoint"

// exposeAPI serves the API (listening at apiAddr) to the machines at the
// gateway. What a caller there may do is still its token's: up gives the
// machines a pull-only scoped token, never the admin one.
func (s *Server) exposeAPI(ctx context.Context, apiAddr, dataDir string) error {
	if s.hv == nil {
		return nil
	}
	at, err := s.hv.Expose(ctx, hypervisor.Exposure{Port: VPCAPIPort, Target: apiAddr})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dataDir, VPCEndpointFile), []byte("http://"+at.String()+"\n"), 0o644)
}

func (s *Server) closeMachines() {
	if s.hv != nil {
		if err := s.hv.Close(context.Background()); err != nil {
			s.logger.Error(err, "Removing the real machines")
		}
		s.hv = nil
	}
}

// vipRouter serves the data plane's routed load balancers with the VPC
// router (dataplane.VIPRouter on vpc.Network).
type vipRouter struct{ nw *vpc.Network }

func (v vipRouter) SetRoutedVIP(r dataplane.RoutedVIP) error {
	out := vpc.RoutedVIP{VIP: r.VIP, Sources: r.Sources, Via: r.Via}
	for _, p := range r.Ports {
		out.Ports = append(out.Ports, vpc.VIPPort{Protocol: p.Protocol, Port: p.Port})
	}
	return v.nw.SetRoutedVIP(out)
}

func (v vipRouter) DeleteRoutedVIP(vip netip.Addr) error { return v.nw.DeleteRoutedVIP(vip) }

// vipForwarder is the data plane's kernel path for proxied load balancers
// in the VPC router (dataplane.VIPForwarder on vpc.Network).
type vipForwarder struct{ nw *vpc.Network }

func (v vipForwarder) SetForwardedVIP(f dataplane.ForwardedVIP) error {
	out := vpc.ForwardedVIP{VIP: f.VIP, Sources: f.Sources, Affinity: f.Affinity}
	for _, p := range f.Ports {
		out.Ports = append(out.Ports, vpc.ForwardedPort{Protocol: p.Protocol, Port: p.Port, Backends: p.Backends})
	}
	if err := v.nw.SetForwardedVIP(out); errors.Is(err, vpc.ErrNotForwardable) {
		return fmt.Errorf("%w: %w", dataplane.ErrNotForwardable, err)
	} else if err != nil {
		return err
	}
	return nil
}

func (v vipForwarder) DeleteForwardedVIP(vip netip.Addr) error { return v.nw.DeleteForwardedVIP(vip) }

func (v vipForwarder) EndFlows(f dataplane.FlowFilter) (int, error) {
	return v.nw.EndFlows(vpc.FlowFilter{VIP: f.VIP, Protocol: f.Protocol, Port: f.Port, Backend: f.Backend, BackendPort: f.BackendPort})
}
