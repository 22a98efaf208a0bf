package route

import (
	"context"
	"net/netip"
	"sync"

	"github.com/portside-io/portside/pkg/cloud"
)

// routeCache is the controller's view of the cloud's routes: filled by a
// full list at start and on each resync, and kept current by the
// controller's own creates and deletes, so a node event costs no list.
type routeCache struct {
	mu     sync.Mutex
	byNode map[string][]cloud.Route

	// listMu serializes lists, so a burst of lookups shares one.
	listMu sync.Mutex
	gen    int // bumped by every full replace
}

func newRouteCache() *routeCache { return &routeCache{byNode: map[string][]cloud.Route{}} }

func (c *routeCache) replace(routes []cloud.Route) {
	m := map[string][]cloud.Route{}
	for _, r := range routes {
		r.DestinationCIDR = r.DestinationCIDR.Masked()
		m[r.TargetNode] = append(m[r.TargetNode], r)
	}
	c.mu.Lock()
	c.byNode = m
	c.gen++
	c.mu.Unlock()
}

func (c *routeCache) generation() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *routeCache) routesTo(node string) []cloud.Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cloud.Route(nil), c.byNode[node]...)
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

func (c *routeCache) added(node string, dst netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The SDK's CreateRoute does not return the cloud's name for the route;
	// a later delete looks it up (refreshNames).
	c.byNode[node] = append(c.byNode[node], cloud.Route{TargetNode: node, DestinationCIDR: dst})
}

func (c *routeCache) removed(r cloud.Route) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.byNode[r.TargetNode]
	for i, e := range list {
		if e.DestinationCIDR == r.DestinationCIDR.Masked() && e.Blackhole == r.Blackhole {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.byNode, r.TargetNode)
	} else {
		c.byNode[r.TargetNode] = list
	}
}

// refreshNames re-lists the routes unless another caller did since seen,
// so routes this controller created learn their cloud names.
func (c *routeCache) refreshNames(ctx context.Context, seen int, list func(context.Context) ([]cloud.Route, error)) error {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	if c.generation() != seen {
		return nil
	}
	routes, err := list(ctx)
	if err != nil {
		return err
	}
	c.replace(routes)
	return nil
}
