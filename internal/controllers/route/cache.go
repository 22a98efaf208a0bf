package route

import (
	"context"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// cachedRoute is a route as the controller knows it. A route this
// controller created since the last list is pending: the SDK's CreateRoute
// does not return the cloud's name, so deleting it takes a list that
// started after it was created.
type cachedRoute struct {
	cloud.Route
	pending bool
	// seq is the number of lists started when the route was created.
	seq int
}

// routeCache is the controller's view of the cloud's routes: filled by a
// full list at start and on each resync, and kept current by the
// controller's own creates and deletes, so a node event costs no list.
type routeCache struct {
	mu      sync.Mutex
	byNode  map[string][]cachedRoute
	started int // lists started so far

	// listMu serializes lists, so a burst of deletes shares one.
	listMu sync.Mutex
}

func newRouteCache() *routeCache { return &routeCache{byNode: map[string][]cachedRoute{}} }

// list runs a full list and replaces the cache with it, keeping pending
// routes created after the list started (it may not show them).
func (c *routeCache) list(ctx context.Context, list func(context.Context) ([]cloud.Route, error)) ([]cloud.Route, error) {
	c.mu.Lock()
	c.started++
	seq := c.started
	c.mu.Unlock()
	routes, err := list(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string][]cachedRoute{}
	for _, r := range routes {
		r.DestinationCIDR = r.DestinationCIDR.Masked()
		m[r.TargetNode] = append(m[r.TargetNode], cachedRoute{Route: r})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for node, entries := range c.byNode {
		for _, e := range entries {
			if e.pending && e.seq >= seq && find(m[node], e.DestinationCIDR) < 0 {
				m[node] = append(m[node], e)
			}
		}
	}
	c.byNode = m
	return routes, nil
}

func find(entries []cachedRoute, dst netip.Prefix) int {
	for i, e := range entries {
		if e.DestinationCIDR == dst {
			return i
		}
	}
	return -1
}

func (c *routeCache) routesTo(node string) []cloud.Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]cloud.Route, 0, len(c.byNode[node]))
	for _, e := range c.byNode[node] {
		out = append(out, e.Route)
	}
	return out
}

// nodes lists the targets of cached routes.
func (c *routeCache) nodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.byNode))
	for n := range c.byNode {
		out = append(out, n)
	}
	return out
}

func (c *routeCache) added(node string, dst netip.Prefix, addrs []corev1.NodeAddress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byNode[node] = append(c.byNode[node], cachedRoute{Route: cloud.Route{TargetNode: node, DestinationCIDR: dst, TargetNodeAddresses: addrs}, pending: true, seq: c.started})
}

func (c *routeCache) removed(node string, dst netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.byNode[node]
	if i := find(list, dst); i >= 0 {
		list = append(list[:i:i], list[i+1:]...)
	}
	if len(list) == 0 {
		delete(c.byNode, node)
	} else {
		c.byNode[node] = list
	}
}

// resolve returns the cloud's record of the route from node to dst, listing
// the routes first if the controller created it since the last list that
// could show it. ok is false when the cloud has no such route.
func (c *routeCache) resolve(ctx context.Context, node string, dst netip.Prefix, list func(context.Context) ([]cloud.Route, error)) (cloud.Route, bool, error) {
	lookup := func() (cachedRoute, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if i := find(c.byNode[node], dst); i >= 0 {
			return c.byNode[node][i], true
		}
		return cachedRoute{}, false
	}
	e, ok := lookup()
	if !ok || !e.pending {
		return e.Route, ok, nil
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	// Another delete may have listed since (the entry is then named).
	if e, ok = lookup(); !ok || !e.pending {
		return e.Route, ok, nil
	}
	if _, err := c.list(ctx, list); err != nil {
		return cloud.Route{}, false, err
	}
	e, ok = lookup() // that list started after the create: absent means gone
	return e.Route, ok && !e.pending, nil
}
