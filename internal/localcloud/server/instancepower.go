package server

import (
	"net/http"
	"net/netip"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// A stopped instance answers nothing: the data plane fails health checks
// of backends at its addresses. These keep that in step with the store.

func instanceAddrs(inst api.Instance) []netip.Addr {
	var out []netip.Addr
	for _, a := range inst.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

func (s *Server) storedInstance(id string) (api.Instance, bool) {
	var inst api.Instance
	var ok bool
	_ = s.store.View(func(tx *store.Tx) (err error) {
		inst, ok, err = store.Get[api.Instance](tx, store.Instances, id)
		return err
	})
	return inst, ok
}

// syncPower runs a start/stop handler, then applies the committed state.
func (s *Server) syncPower(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		next(w, r)
		if inst, ok := s.storedInstance(r.PathValue("id")); ok {
			s.plane.SetPoweredOff(instanceAddrs(inst), inst.State == api.InstanceStopped)
		}
	}
}

// releasePower runs a delete handler; once the instance is gone, its
// addresses (which may go to another instance) are no longer powered off.
func (s *Server) releasePower(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		inst, existed := s.storedInstance(r.PathValue("id"))
		next(w, r)
		if _, still := s.storedInstance(r.PathValue("id")); existed && !still {
			s.plane.SetPoweredOff(instanceAddrs(inst), false)
		}
	}
}

// restorePower marks stopped instances after a restart.
func (s *Server) restorePower() error {
	return s.store.View(func(tx *store.Tx) error {
		insts, err := store.List[api.Instance](tx, store.Instances)
		for _, inst := range insts {
			if inst.State == api.InstanceStopped {
				s.plane.SetPoweredOff(instanceAddrs(inst), true)
			}
		}
		return err
	})
}

// planePoweredOff reports whether addr is marked stopped (for tests).
func (s *Server) planePoweredOff(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	return err == nil && s.plane.PoweredOff(ip)
}
