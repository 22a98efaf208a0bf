package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// validateLBSpec checks a load-balancer spec and fills defaults.
func (s *Server) validateLBSpec(spec *api.LoadBalancerSpec) error {
	if spec.Cluster == "" {
		return invalid("cluster is empty: every load balancer is tagged with the cluster that owns it")
	}
	lim := s.limits()
	if err := checkLen("cluster", spec.Cluster, lim.ClusterNameLen); err != nil {
		return err
	}
	if err := checkTags("tags", spec.Tags, lim); err != nil {
		return err
	}
	if len(spec.Listeners) > lim.ListenersPerLB {
		return tooMany("listeners", len(spec.Listeners), lim.ListenersPerLB)
	}
	if err := s.checkBackends(spec.Backends); err != nil {
		return err
	}
	if len(spec.SourceRanges) > lim.SourceRangesPerLB {
		return tooMany("sourceRanges", len(spec.SourceRanges), lim.SourceRangesPerLB)
	}
	if len(spec.Listeners) == 0 {
		return invalid("listeners is empty: a load balancer needs at least one port")
	}
	seen := map[string]bool{}
	for i, l := range spec.Listeners {
		if l.Protocol != api.ProtocolTCP && l.Protocol != api.ProtocolUDP {
			return invalid("listeners[%d].protocol %q is not supported: use TCP or UDP", i, l.Protocol)
		}
		if l.Port < 1 || l.Port > 65535 {
			return invalid("listeners[%d].port %d is out of range 1-65535", i, l.Port)
		}
		if l.BackendPort == 0 && s.opts.DataPlane.Router == nil {
			return invalid("listeners[%d].backendPort 0: a load balancer without backend ports routes its VIPs to the backends, which only a cloud with real machines can (--machines=real); give every listener a backendPort (the Service's NodePort)", i)
		}
		if l.BackendPort < 0 || l.BackendPort > 65535 {
			return invalid("listeners[%d].backendPort %d is out of range 1-65535 (0: routed to the backends, with real machines)", i, l.BackendPort)
		}
		key := fmt.Sprintf("%s/%d", l.Protocol, l.Port)
		if seen[key] {
			return invalid("listeners[%d]: port %s is listed twice", i, key)
		}
		seen[key] = true
	}
	switch spec.DataPath {
	case "", api.DataPathKernel, api.DataPathProxy:
	default:
		return invalid("dataPath %q is not supported: use %s (the VPC router's kernel where the cloud has real machines; the default) or %s (the proxy serves every flow)", spec.DataPath, api.DataPathKernel, api.DataPathProxy)
	}
	for i, c := range spec.SourceRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return invalid("sourceRanges[%d] %q is not a CIDR (want e.g. 203.0.113.0/24)", i, c)
		}
		spec.SourceRanges[i] = p.Masked().String()
	}
	if hc := spec.HealthCheck; hc != nil {
		switch hc.Type {
		case api.HealthCheckTCP:
		case api.HealthCheckHTTP:
			if hc.Port < 1 || hc.Port > 65535 {
				return invalid("healthCheck.port %d is out of range 1-65535", hc.Port)
			}
			if !strings.HasPrefix(hc.Path, "/") {
				return invalid("healthCheck.path %q must start with /", hc.Path)
			}
		default:
			return invalid("healthCheck.type %q is not supported: use http or tcp", hc.Type)
		}
	}
	if len(spec.IPFamilies) == 0 {
		spec.IPFamilies = []string{"IPv4"}
	}
	for _, f := range spec.IPFamilies {
		switch f {
		case "IPv4":
		case "IPv6":
			if !s.opts.VIPPoolV6.IsValid() {
				return invalid("ipFamilies: this cloud has no IPv6 VIP pool; start it with --vip-pool-v6 (a prefix routed to lo)")
			}
		default:
			return invalid("ipFamilies: %q is not IPv4 or IPv6", f)
		}
	}
	if spec.RequestedIP != "" {
		a, err := netip.ParseAddr(spec.RequestedIP)
		if err != nil || !(s.opts.VIPPoolV4.Contains(a) || s.opts.VIPPoolV6.IsValid() && s.opts.VIPPoolV6.Contains(a)) {
			return invalid("requestedIP %q is not an address of the VIP pool %s", spec.RequestedIP, s.opts.VIPPoolV4)
		}
	}
	return nil
}

func (s *Server) putLoadBalancer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := validName("load balancer name", name, s.limits().LBNameLen); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	var spec api.LoadBalancerSpec
	if err := decode(w, r, &spec); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := s.validateLBSpec(&spec); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	defer lbLocks.lock(s, name)()
	var lb api.LoadBalancer
	var status int
	var dropped []string
	err := s.store.Update(func(tx *store.Tx) error {
		cur, exists, err := store.Get[api.LoadBalancer](tx, store.LoadBalancers, name)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		if exists && cur.Cluster != spec.Cluster {
			return conflict("load balancer %q belongs to cluster %q, not %q", name, cur.Cluster, spec.Cluster)
		}
		status = http.StatusOK
		if !exists {
			if err := checkCount(tx, store.LoadBalancers, "load balancers", s.limits().LoadBalancers); err != nil {
				return err
			}
			status = http.StatusCreated
			cur = api.LoadBalancer{Name: name, CreatedAt: now}
		}
		var vips []string
		vips, dropped, err = s.allocateVIPs(tx, name, cur.VIPs, spec)
		if err != nil {
			return err
		}
		lb = cur
		lb.LoadBalancerSpec = spec
		lb.VIPs = vips
		lb.UpdatedAt = now
		return putExpectingActive(tx, &lb)
	})
	if err == nil {
		err = s.applyCommitted(&lb)
		if len(dropped) > 0 {
			err = errors.Join(err, s.releaseIPs(dropped))
		}
	}
	respond(w, r, status, lb, err)
}

// allocateVIPs keeps the current VIPs of the wanted families and allocates
// the missing ones. It returns the current VIPs no longer wanted, still
// claimed: the caller releases them once they are no longer served.
func (s *Server) allocateVIPs(tx *store.Tx, name string, current []string, spec api.LoadBalancerSpec) (vips, dropped []string, err error) {
	owner := "lb/" + name
	var out []string
	for _, fam := range spec.IPFamilies {
		pool := s.opts.VIPPoolV4
		if fam == "IPv6" {
			pool = s.opts.VIPPoolV6
		}
		keep := ""
		for _, v := range current {
			if a, err := netip.ParseAddr(v); err == nil && pool.Contains(a) && (spec.RequestedIP == "" || v == spec.RequestedIP) {
				keep = v
			}
		}
		if keep == "" && spec.RequestedIP != "" {
			if a := netip.MustParseAddr(spec.RequestedIP); pool.Contains(a) {
				if err := tx.ClaimIP(a, owner); err != nil {
					return nil, nil, conflict("requestedIP: %v", err)
				}
				keep = a.String()
			}
		}
		if keep == "" {
			a, err := tx.AllocateIP(pool, owner)
			if err != nil {
				return nil, nil, &apiError{http.StatusInsufficientStorage, "QuotaExceeded", fmt.Sprintf("no free VIP: %v", err)}
			}
			keep = a.String()
		}
		out = append(out, keep)
	}
	for _, v := range current {
		if !slices.Contains(out, v) {
			dropped = append(dropped, v)
		}
	}
	return out, dropped, nil
}

// putExpectingActive stores lb as active: the data plane is programmed
// only after the commit (a store function may run more than once, and an
// uncommitted change must never be served), and applyCommitted records an
// error if programming fails. Callers hold the name's lbLocks lock.
func putExpectingActive(tx *store.Tx, lb *api.LoadBalancer) error {
	lb.State, lb.Message = api.LoadBalancerActive, ""
	return putLB(tx, lb)
}

// applyCommitted programs the data plane with a committed load balancer. A
// listener that cannot bind is reported in state and message; the record
// is kept so that the client can fix it or delete it.
func (s *Server) applyCommitted(lb *api.LoadBalancer) error {
	applyErr := s.plane.Apply(dataplaneConfig(lb))
	if applyErr == nil {
		return nil
	}
	lb.State, lb.Message = api.LoadBalancerError, applyErr.Error()
	return s.store.Update(func(tx *store.Tx) error { return putLBRecord(tx, lb) })
}

// releaseIPs frees VIPs a committed change dropped. Only now that the data
// plane has let go of them may another load balancer get (and bind) them;
// a crash before this commit leaks them, it never double-binds.
func (s *Server) releaseIPs(vips []string) error {
	return s.store.Update(func(tx *store.Tx) error {
		for _, v := range vips {
			if err := tx.ReleaseIP(v); err != nil {
				return err
			}
		}
		return nil
	})
}

func dataplaneConfig(lb *api.LoadBalancer) dataplane.Config {
	cfg := dataplane.Config{Name: lb.Name, Listeners: lb.Listeners, Backends: lb.Backends,
		HealthCheck: lb.HealthCheck, ClientIPAffinity: lb.ClientIPAffinity, ProxyOnly: lb.DataPath == api.DataPathProxy}
	for _, v := range lb.VIPs {
		if a, err := netip.ParseAddr(v); err == nil {
			cfg.VIPs = append(cfg.VIPs, a)
		}
	}
	for _, c := range lb.SourceRanges {
		if p, err := netip.ParsePrefix(c); err == nil {
			cfg.SourceRanges = append(cfg.SourceRanges, p)
		}
	}
	return cfg
}

func (s *Server) putBackends(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req api.SetBackendsRequest
	if err := decode(w, r, &req); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if err := s.checkBackends(req.Backends); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	defer lbLocks.lock(s, name)()
	var lb api.LoadBalancer
	err := s.store.Update(func(tx *store.Tx) error {
		var ok bool
		var err error
		lb, ok, err = store.Get[api.LoadBalancer](tx, store.LoadBalancers, name)
		if err != nil {
			return err
		}
		if !ok {
			return notFound("load balancer %q not found", name)
		}
		lb.Backends = req.Backends
		lb.UpdatedAt = time.Now().UTC()
		return putExpectingActive(tx, &lb)
	})
	if err == nil {
		err = s.applyCommitted(&lb)
	}
	respond(w, r, http.StatusOK, lb, err)
}

func (s *Server) listLoadBalancers(w http.ResponseWriter, r *http.Request) {
	cluster := r.URL.Query().Get("cluster")
	out := []api.LoadBalancer{}
	err := s.store.View(func(tx *store.Tx) error {
		all, err := listLBs(tx)
		for _, lb := range all {
			if cluster == "" || lb.Cluster == cluster {
				out = append(out, lb)
			}
		}
		return err
	})
	respond(w, r, http.StatusOK, out, err)
}

func (s *Server) getLoadBalancer(w http.ResponseWriter, r *http.Request) {
	var lb api.LoadBalancer
	err := s.store.View(func(tx *store.Tx) error {
		var ok bool
		var err error
		lb, ok, err = getLB(tx, r.PathValue("name"))
		if err == nil && !ok {
			return notFound("load balancer %q not found", r.PathValue("name"))
		}
		return err
	})
	respond(w, r, http.StatusOK, lb, err)
}

func (s *Server) getLoadBalancerHealth(w http.ResponseWriter, r *http.Request) {
	h, ok := s.plane.Health(r.PathValue("name"))
	if !ok {
		respond(w, r, 0, nil, notFound("load balancer %q not found", r.PathValue("name")))
		return
	}
	respond(w, r, http.StatusOK, h, nil)
}

// deleteLoadBalancer stops serving before the commit that releases the
// VIPs: once released, another load balancer may get them and must be able
// to bind. If the commit fails, serving resumes.
func (s *Server) deleteLoadBalancer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	defer lbLocks.lock(s, name)()
	var lb api.LoadBalancer
	var ok bool
	err := s.store.View(func(tx *store.Tx) (err error) {
		lb, ok, err = getLB(tx, name)
		return err
	})
	if err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	s.plane.Remove(name) // also when not found: nothing unstored is served
	if !ok {
		respond(w, r, 0, nil, notFound("load balancer %q not found", name))
		return
	}
	err = s.store.Update(func(tx *store.Tx) error {
		for _, v := range lb.VIPs {
			if err := tx.ReleaseIP(v); err != nil {
				return err
			}
		}
		return deleteLB(tx, name)
	})
	if err != nil {
		_ = s.plane.Apply(dataplaneConfig(&lb))
	}
	respond(w, r, 0, nil, err)
}

// BackendCounts returns, for each load balancer of cluster, its number of
// backends: a cheap probe for benchmarks waiting on host-set propagation.
func (s *Server) BackendCounts(cluster string) (map[string]int, error) {
	out := map[string]int{}
	err := s.store.View(func(tx *store.Tx) error {
		all, err := store.List[api.LoadBalancer](tx, store.LoadBalancers)
		for _, lb := range all {
			if lb.Cluster == cluster {
				out[lb.Name] = max(len(lb.Backends), tx.CountIn(store.LBBackends, lb.Name))
			}
		}
		return err
	})
	return out, err
}

// checkBackends validates backend addresses and their number.
func (s *Server) checkBackends(bs []api.Backend) error {
	if limit := s.limits().BackendsPerLB; len(bs) > limit {
		return tooMany("backends", len(bs), limit)
	}
	for i, b := range bs {
		if _, err := netip.ParseAddr(b.Address); err != nil {
			return invalid("backends[%d].address %q is not an IP address", i, b.Address)
		}
	}
	return nil
}

// lbLocks serializes, per load balancer, the store commit and the data
// plane change that follows it, so that the order of commits is the order
// in which the data plane sees them (a DELETE racing a PUT never leaves a
// stored but unserved, or a served but deleted, load balancer).
var lbLocks = keyedMutex{m: map[lbKey]*keyedEntry{}}

type lbKey struct {
	s    *Server
	name string
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

type keyedMutex struct {
	mu sync.Mutex
	m  map[lbKey]*keyedEntry
}

// lock locks name of s and returns the unlock function. Entries are
// dropped when unused, so the map holds only names in flight.
func (k *keyedMutex) lock(s *Server, name string) (unlock func()) {
	key := lbKey{s, name}
	k.mu.Lock()
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
