package server

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func (s *Server) createRoute(w http.ResponseWriter, r *http.Request) {
	var rt api.Route
	if err := decode(w, r, &rt); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if rt.Cluster == "" {
		respond(w, r, 0, nil, invalid("cluster is empty: routes belong to a cluster"))
		return
	}
	lim := s.limits()
	if err := checkLen("cluster", rt.Cluster, lim.ClusterNameLen); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := checkLen("clusterUID", rt.ClusterUID, lim.ClusterNameLen); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := validName("route name", rt.Name, lim.RouteNameLen); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	dst, err := netip.ParsePrefix(rt.DestinationCIDR)
	if err != nil {
		respond(w, r, 0, nil, invalid("destinationCIDR %q is not a CIDR (want e.g. 10.244.1.0/24)", rt.DestinationCIDR))
		return
	}
	rt.DestinationCIDR = dst.Masked().String()
	rt.CreatedAt = time.Now().UTC()
	rt.Blackhole = false
	err = s.store.Update(func(tx *store.Tx) error {
		if tx.Exists(store.Routes, rt.Name) {
			return conflict("a route named %q already exists", rt.Name)
		}
		if err := checkCount(tx, store.Routes, "routes", lim.Routes); err != nil {
			return err
		}
		id, ok, err := store.Get[string](tx, store.Meta, "instance-name/"+rt.TargetNode)
		if err != nil {
			return err
		}
		if !ok {
			return invalid("targetNode %q: no instance has that name", rt.TargetNode)
		}
		rt.TargetInstance = id
		if other, cidr, ok := tx.OverlappingRoute(rt.Cluster, dst); ok {
			return conflict("destinationCIDR %s overlaps route %q (%s)", rt.DestinationCIDR, other, cidr)
		}
		if err := tx.IndexRoute(rt.Cluster, dst, rt.Name); err != nil {
			return err
		}
		return tx.Put(store.Routes, rt.Name, rt)
	})
	if err == nil {
		err = s.routeMachines(rt, true)
	}
	respond(w, r, http.StatusCreated, rt, err)
}

// listRoutes marks routes whose target instance is gone as blackholes.
func (s *Server) listRoutes(w http.ResponseWriter, r *http.Request) {
	cluster := r.URL.Query().Get("cluster")
	out := []api.Route{}
	err := s.store.View(func(tx *store.Tx) error {
		all, err := store.List[api.Route](tx, store.Routes)
		for _, rt := range all {
			if cluster != "" && rt.Cluster != cluster {
				continue
			}
			rt.Blackhole = !tx.Exists(store.Instances, rt.TargetInstance)
			out = append(out, rt)
		}
		return err
	})
	respond(w, r, http.StatusOK, out, err)
}

func (s *Server) deleteRoute(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var rt api.Route
	err := s.store.Update(func(tx *store.Tx) error {
		var ok bool
		var err error
		rt, ok, err = store.Get[api.Route](tx, store.Routes, name)
		if err != nil {
			return err
		}
		if !ok {
			return notFound("route %q not found", name)
		}
		if dst, err := netip.ParsePrefix(rt.DestinationCIDR); err == nil {
			if err := tx.UnindexRoute(rt.Cluster, dst); err != nil {
				return err
			}
		}
		return tx.Delete(store.Routes, name)
	})
	if err == nil {
		err = s.routeMachines(rt, false)
	}
	respond(w, r, 0, nil, err)
}

// RouteCount returns the number of routes, without counting as an API call:
// a cheap probe for benchmarks.
func (s *Server) RouteCount() int {
	n := 0
	_ = s.store.View(func(tx *store.Tx) error {
		all, err := store.List[api.Route](tx, store.Routes)
		n = len(all)
		return err
	})
	return n
}

// reindexRoutes rebuilds the route index from the routes at start.
func (s *Server) reindexRoutes() error {
	return s.store.Update(func(tx *store.Tx) error {
		if err := tx.ClearRouteIndex(); err != nil {
			return err
		}
		routes, err := store.List[api.Route](tx, store.Routes)
		if err != nil {
			return err
		}
		for _, rt := range routes {
			if dst, err := netip.ParsePrefix(rt.DestinationCIDR); err == nil {
				if err := tx.IndexRoute(rt.Cluster, dst, rt.Name); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
