package server

import (
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"time"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// nameRE is a DNS label: what node names and cloud names are.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

// validName checks a name is a DNS name of at most limit characters.
func validName(what, name string, limit int) error {
	if err := checkLen(what, name, limit); err != nil {
		return err
	}
	if !nameRE.MatchString(name) {
		return invalid("%s %q is not valid: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters", what, name)
	}
	return nil
}

func (s *Server) listRegions(w http.ResponseWriter, r *http.Request) {
	respond(w, r, http.StatusOK, s.opts.Regions, nil)
}

func (s *Server) listInstanceTypes(w http.ResponseWriter, r *http.Request) {
	respond(w, r, http.StatusOK, s.opts.InstanceTypes, nil)
}

// regionOf returns the region of a zone, or an error listing the zones.
func (s *Server) regionOf(zone string) (string, error) {
	var all []string
	for _, reg := range s.opts.Regions {
		if slices.Contains(reg.Zones, zone) {
			return reg.Name, nil
		}
		all = append(all, reg.Zones...)
	}
	return "", invalid("unknown zone %q: zones are %v", zone, all)
}

func (s *Server) createInstance(w http.ResponseWriter, r *http.Request) {
	var req api.CreateInstanceRequest
	if err := decode(w, r, &req); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := s.checkUserData(req.UserData); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	inst, err := s.newInstance(req)
	if err == nil && req.UserData != "" {
		err = s.bootNew(r.Context(), inst, req.UserData)
	}
	respond(w, r, http.StatusCreated, inst, err)
}

func (s *Server) newInstance(req api.CreateInstanceRequest) (*api.Instance, error) {
	lim := s.limits()
	if err := validName("instance name", req.Name, lim.InstanceNameLen); err != nil {
		return nil, err
	}
	if err := checkTags("labels", req.Labels, lim); err != nil {
		return nil, err
	}
	region, err := s.regionOf(req.Zone)
	if err != nil {
		return nil, err
	}
	if req.Type == "" {
		req.Type = s.opts.InstanceTypes[0].Name
	}
	if !slices.ContainsFunc(s.opts.InstanceTypes, func(t api.InstanceType) bool { return t.Name == req.Type }) {
		return nil, invalid("unknown instance type %q: see GET /v1/instance-types", req.Type)
	}
	ipv4 := req.IPv4 == nil || *req.IPv4
	if !ipv4 && !req.IPv6 {
		return nil, invalid("an instance needs an address: ipv4 and ipv6 are both false")
	}
	podCIDRs, err := validPodCIDRs(req.PodCIDRs)
	if err != nil {
		return nil, err
	}
	inst := &api.Instance{Name: req.Name, Zone: req.Zone, Region: region, Type: req.Type, State: api.InstanceRunning,
		Labels: req.Labels, PodCIDRs: podCIDRs, CreatedAt: time.Now().UTC()}
	err = s.store.Update(func(tx *store.Tx) error {
		inst.Addresses = nil // the function may run again (group commit)
		if tx.Exists(store.Meta, "instance-name/"+req.Name) {
			return conflict("an instance named %q already exists", req.Name)
		}
		if err := checkCount(tx, store.Instances, "instances", lim.Instances); err != nil {
			return err
		}
		seq, err := tx.NextID(store.Instances)
		if err != nil {
			return err
		}
		inst.ID = fmt.Sprintf("i-%08x", seq)
		if ipv4 {
			a, err := tx.AllocateIP(s.opts.NodePoolV4, "instance/"+inst.ID)
			if err != nil {
				return invalid("cannot allocate an IPv4 address: %v", err)
			}
			inst.Addresses = append(inst.Addresses, api.Address{Type: api.AddressInternalIP, Address: a.String()})
		}
		if req.IPv6 {
			a, err := tx.AllocateIP(s.opts.NodePoolV6, "instance/"+inst.ID)
			if err != nil {
				return invalid("cannot allocate an IPv6 address: %v", err)
			}
			inst.Addresses = append(inst.Addresses, api.Address{Type: api.AddressInternalIP, Address: a.String()})
		}
		inst.Addresses = append(inst.Addresses,
			api.Address{Type: api.AddressHostname, Address: inst.Name},
			api.Address{Type: api.AddressInternalDNS, Address: inst.Name + "." + inst.Zone + ".internal"})
		if err := tx.Put(store.Meta, "instance-name/"+req.Name, inst.ID); err != nil {
			return err
		}
		if req.UserData != "" {
			if err := tx.Put(store.Meta, userDataKey(inst.ID), req.UserData); err != nil {
				return err
			}
		}
		return tx.Put(store.Instances, inst.ID, inst)
	})
	if err != nil {
		return nil, err
	}
	return inst, nil
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	name, zone := r.URL.Query().Get("name"), r.URL.Query().Get("zone")
	var out []api.Instance
	err := s.store.View(func(tx *store.Tx) error {
		if name != "" {
			// By name through the name index: one read, not a scan (nodes
			// without a providerID are looked up this way, thousands at once).
			id, ok, err := store.Get[string](tx, store.Meta, "instance-name/"+name)
			if err != nil || !ok {
				return err
			}
			inst, ok, err := store.Get[api.Instance](tx, store.Instances, id)
			if ok && (zone == "" || inst.Zone == zone) {
				out = append(out, inst)
			}
			return err
		}
		all, err := store.List[api.Instance](tx, store.Instances)
		for _, i := range all {
			if (name == "" || i.Name == name) && (zone == "" || i.Zone == zone) {
				out = append(out, i)
			}
		}
		return err
	})
	if out == nil {
		out = []api.Instance{}
	}
	respond(w, r, http.StatusOK, out, err)
}

func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	var inst api.Instance
	err := s.store.View(func(tx *store.Tx) error {
		var ok bool
		var err error
		inst, ok, err = store.Get[api.Instance](tx, store.Instances, r.PathValue("id"))
		if err == nil && !ok {
			return notFound("instance %q not found", r.PathValue("id"))
		}
		return err
	})
	respond(w, r, http.StatusOK, inst, err)
}

func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.store.Update(func(tx *store.Tx) error {
		inst, ok, err := store.Get[api.Instance](tx, store.Instances, id)
		if err != nil {
			return err
		}
		if !ok {
			return notFound("instance %q not found", id)
		}
		for _, a := range inst.Addresses {
			if a.Type == api.AddressInternalIP {
				if err := tx.ReleaseIP(a.Address); err != nil {
					return err
				}
			}
		}
		if err := tx.Delete(store.Meta, "instance-name/"+inst.Name); err != nil {
			return err
		}
		if err := tx.Delete(store.Meta, userDataKey(id)); err != nil {
			return err
		}
		return tx.Delete(store.Instances, id)
	})
	if err == nil {
		err = s.deleteMachine(r.Context(), id)
	}
	respond(w, r, 0, nil, err)
}

func (s *Server) setInstanceState(state string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var inst api.Instance
		err := s.store.Update(func(tx *store.Tx) error {
			var ok bool
			var err error
			inst, ok, err = store.Get[api.Instance](tx, store.Instances, id)
			if err != nil {
				return err
			}
			if !ok {
				return notFound("instance %q not found", id)
			}
			inst.State = state
			return tx.Put(store.Instances, id, inst)
		})
		if err == nil {
			err = s.powerMachine(r.Context(), inst)
		}
		respond(w, r, http.StatusOK, inst, err)
	}
}

// validPodCIDRs checks an instance's pod CIDRs: CIDRs, at most one per family.
func validPodCIDRs(in []string) ([]string, error) {
	var out []string
	seen := map[bool]bool{}
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, invalid("podCIDRs: %q is not a CIDR (want e.g. 10.244.1.0/24)", s)
		}
		if seen[p.Addr().Is4()] {
			return nil, invalid("podCIDRs: at most one IPv4 and one IPv6 CIDR, got %v", in)
		}
		seen[p.Addr().Is4()] = true
		out = append(out, p.Masked().String())
	}
	return out, nil
}
