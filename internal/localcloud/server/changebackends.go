package server

import (
	"net/http"
	"time"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// changeBackends is PATCH /v1/load-balancers/{name}/backends: the work is
// the change's size, not the load balancer's (one record per backend in
// the store, one backend in the data plane), so a node joining 500 others
// costs each load balancer one backend's write.
func (s *Server) changeBackends(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req api.ChangeBackendsRequest
	if err := decode(w, r, &req); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := s.checkBackends(req.Add); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if limit := s.limits().BackendsPerLB; len(req.Remove) > limit {
		respond(w, r, 0, nil, tooMany("remove", len(req.Remove), limit))
		return
	}
	defer lbLocks.lock(s, name)()
	var n int
	var removed []api.Backend
	err := s.store.Update(func(tx *store.Tx) error {
		lb, ok, err := store.Get[api.LoadBalancer](tx, store.LoadBalancers, name)
		if err != nil {
			return err
		}
		if !ok {
			return notFound("load balancer %q not found", name)
		}
		if n, removed, err = changeLBBackends(tx, name, req.Add, req.Remove); err != nil {
			return err
		}
		if limit := s.limits().BackendsPerLB; n > limit {
			return invalid("the load balancer would have %d backends: the limit is %d", n, limit)
		}
		lb.UpdatedAt = time.Now().UTC()
		return putLBRecord(tx, &lb)
	})
	if err == nil {
		// After the commit, under the name's lock, as every data-plane
		// change; only the removals the store made (by address and name).
		err = s.plane.ChangeBackends(name, req.Add, removed)
	}
	respond(w, r, http.StatusOK, api.ChangeBackendsResponse{Name: name, Backends: n}, err)
}
