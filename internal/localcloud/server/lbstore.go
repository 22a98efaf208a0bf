package server

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// A load balancer is stored as its record (without backends) in
// store.LoadBalancers and its backends, one record each keyed by address,
// in the store.LBBackends group of its name: a change of one backend
// rewrites one small record. Records written before that keep their
// backends inline, read as they are until the next write.

// getLB reads a load balancer with its backends.
func getLB(tx *store.Tx, name string) (api.LoadBalancer, bool, error) {
	lb, ok, err := store.Get[api.LoadBalancer](tx, store.LoadBalancers, name)
	if err != nil || !ok {
		return lb, ok, err
	}
	return lb, true, withBackends(tx, &lb)
}

func withBackends(tx *store.Tx, lb *api.LoadBalancer) error {
	bes, grouped, err := store.ListIn[api.Backend](tx, store.LBBackends, lb.Name)
	if err != nil {
		return err
	}
	if grouped {
		lb.Backends = bes
	}
	if lb.Backends == nil {
		lb.Backends = []api.Backend{}
	}
	return nil
}

// listLBs reads every load balancer with its backends.
func listLBs(tx *store.Tx) ([]api.LoadBalancer, error) {
	lbs, err := store.List[api.LoadBalancer](tx, store.LoadBalancers)
	if err != nil {
		return nil, err
	}
	for i := range lbs {
		if err := withBackends(tx, &lbs[i]); err != nil {
			return nil, err
		}
	}
	return lbs, nil
}

// putLB writes a load balancer and replaces its backends.
func putLB(tx *store.Tx, lb *api.LoadBalancer) error {
	if err := putLBRecord(tx, lb); err != nil {
		return err
	}
	if err := tx.DeleteGroup(store.LBBackends, lb.Name); err != nil {
		return err
	}
	for _, be := range lb.Backends {
		if err := tx.PutIn(store.LBBackends, lb.Name, be.Address, be); err != nil {
			return err
		}
	}
	return nil
}

// putLBRecord writes the record only (state, spec), keeping the backends.
func putLBRecord(tx *store.Tx, lb *api.LoadBalancer) error {
	rec := *lb
	rec.Backends = nil
	return tx.Put(store.LoadBalancers, lb.Name, rec)
}

// deleteLB removes the record and the backends.
func deleteLB(tx *store.Tx, name string) error {
	if err := tx.Delete(store.LoadBalancers, name); err != nil {
		return err
	}
	return tx.DeleteGroup(store.LBBackends, name)
}

// changeLBBackends removes, then adds, backends (by address) and returns
// how many the load balancer has and the removals it made. A removal that
// names a backend removes it only while the backend at that address still
// has that name (ownedBy): a node given a deleted node's address may have
// taken the backend over since, and the old node's late removal must not
// take the new one out.
func changeLBBackends(tx *store.Tx, name string, add, remove []api.Backend) (int, []api.Backend, error) {
	if !tx.HasGroup(store.LBBackends, name) {
		// A record with inline backends: move them to the group first.
		lb, _, err := store.Get[api.LoadBalancer](tx, store.LoadBalancers, name)
		if err != nil {
			return 0, nil, err
		}
		if err := putLB(tx, &lb); err != nil {
			return 0, nil, err
		}
	}
	removed := make([]api.Backend, 0, len(remove))
	for _, be := range remove {
		have, ok, err := store.GetIn[api.Backend](tx, store.LBBackends, name, be.Address)
		if err != nil {
			return 0, nil, err
		}
		if !ok || !ownedBy(have.Name, be) {
			continue
		}
		if err := tx.DeleteIn(store.LBBackends, name, be.Address); err != nil {
			return 0, nil, err
		}
		// The data plane removes what the store decided, by address: its
		// names could differ from the store's after a failed apply.
		removed = append(removed, api.Backend{Address: have.Address})
	}
	for _, be := range add {
		if err := tx.PutIn(store.LBBackends, name, be.Address, be); err != nil {
			return 0, nil, err
		}
	}
	return tx.CountIn(store.LBBackends, name), removed, nil
}

// ownedBy reports whether a removal is for the backend named have: a
// removal without a name is by address alone (older clients), and a
// backend stored without a name (a client that set backends without
// names) is removed by address too, or nothing could remove it by name.
func ownedBy(have string, removal api.Backend) bool {
	return removal.Name == "" || have == "" || removal.Name == have
}

// LoadBalancersWithBackend counts the load balancers of cluster ("": of
// every cluster), and those of them that have a backend at addr: a cheap
// probe for benchmarks waiting for a node to reach them all, polled while
// the load balancers change. One lookup per load balancer; a record is
// decoded only for its cluster (and only its cluster field), or when it
// keeps its backends inline.
func (s *Server) LoadBalancersWithBackend(cluster, addr string) (all, with int, err error) {
	err = s.store.View(func(tx *store.Tx) error {
		return tx.ForEachRaw(store.LoadBalancers, func(name string, data []byte) error {
			has := tx.ExistsIn(store.LBBackends, name, addr)
			grouped := has || tx.HasGroup(store.LBBackends, name)
			var rec struct {
				Cluster  string        `json:"cluster"`
				Backends []api.Backend `json:"backends"`
			}
			if cluster != "" || !grouped {
				if err := json.Unmarshal(data, &rec); err != nil {
					return fmt.Errorf("corrupt %s record %q: %w", store.LoadBalancers, name, err)
				}
				if cluster != "" && rec.Cluster != cluster {
					return nil
				}
			}
			all++
			if has ||
				!grouped && slices.ContainsFunc(rec.Backends, func(b api.Backend) bool { return b.Address == addr }) {
				with++
			}
			return nil
		})
	})
	return all, with, err
}

// WriteStats are the store's commit counters (for benchmarks).
func (s *Server) WriteStats() store.WriteStats { return s.store.WriteStats() }
