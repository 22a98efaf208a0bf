package server

import (
	"context"
	"errors"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/localcloud/console"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// State is the console's view of the cloud: one store read, with each load
// balancer's health as the data plane sees it.
func (s *Server) State(_ context.Context) (console.CloudState, error) {
	st := console.CloudState{Regions: s.opts.Regions, Calls: s.callLog.recent()}
	var lbs []api.LoadBalancer
	err := s.store.View(func(tx *store.Tx) (err error) {
		if st.Instances, err = store.List[api.Instance](tx, store.Instances); err != nil {
			return err
		}
		if lbs, err = listLBs(tx); err != nil {
			return err
		}
		if st.Routes, err = store.List[api.Route](tx, store.Routes); err != nil {
			return err
		}
		if st.Volumes, err = store.List[api.Volume](tx, store.Volumes); err != nil {
			return err
		}
		st.Registries, err = store.List[api.Registry](tx, store.Registries)
		return err
	})
	for _, lb := range lbs {
		h, ok := s.plane.Health(lb.Name)
		if !ok {
			h = api.LoadBalancerHealth{Name: lb.Name}
		}
		st.LoadBalancers = append(st.LoadBalancers, console.LoadBalancer{LoadBalancer: lb, Health: h})
	}
	s.faultsMu.RLock()
	st.Faults = api.Faults{Rules: append([]api.FaultRule{}, s.faults.Rules...)}
	s.faultsMu.RUnlock()
	return st, err
}

// SetFaults replaces the fault rules, as PUT /v1/faults does.
func (s *Server) SetFaults(ctx context.Context, f api.Faults) error {
	if err := validateFaults(f); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return console.InvalidError{Err: err}
		}
		return err
	}
	s.faultsMu.Lock()
	s.faults = f
	s.faultsMu.Unlock()
	klog.FromContext(ctx).Info("Fault rules set", "rules", len(f.Rules), "by", "console")
	return nil
}

func (s *Server) createConsoleTicket(w http.ResponseWriter, r *http.Request) {
	var req api.ConsoleTicketRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			respond(w, r, 0, nil, err)
			return
		}
	}
	id, exp := s.console.NewTicket(!req.ReadOnly)
	respond(w, r, http.StatusCreated, api.ConsoleTicket{Path: "/console/login?ticket=" + id, ExpiresAt: exp, ReadOnly: req.ReadOnly}, nil)
}
