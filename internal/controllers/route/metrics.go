package route

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/pkg/cloud"
)

// Label values of route_controller_route_sync_total, as upstream's
// (k8s.io/cloud-provider controllers/route/metrics.go).
const (
	outcomeChanged = "changed"
	outcomeNoop    = "noop"
	outcomeError   = "error"

	triggerPeriodic   = "periodic"
	triggerNodeChange = "node_change"
)

type metrics struct {
	ops *prometheus.CounterVec

	// routeSyncs is upstream's route_controller_route_sync_total, so that
	// dashboards and alerts written for upstream's CCM work.
	routeSyncs *prometheus.CounterVec

	mu sync.Mutex
	// periodic holds the nodes a resync queued, whose next sync is a
	// periodic reconcile rather than one driven by a node change.
	periodic map[string]bool
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "route", Name: "cloud_calls_total",
			Help: "Route calls to the cloud by operation (list, create, delete) and result (success, throttled, error).",
		}, []string{"operation", "result"}),
		routeSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "route_controller",
			Name:      "route_sync_total",
			Help:      "A metric counting the number of route reconciles with the cloud provider, labeled by the trigger (periodic or node_change) and the outcome (error if the reconcile failed, changed if at least one route was created or deleted, otherwise noop).",
		}, []string{"outcome", "trigger"}),
		periodic: map[string]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.ops, m.routeSyncs)
	}
	return m
}

func (m *metrics) op(operation string, err error) {
	result := "success"
	if err != nil {
		result = "error"
		if _, ok := cloud.IsRetryAfter(err); ok {
			result = "throttled"
		}
	}
	m.ops.WithLabelValues(operation, result).Inc()
}

// routeSync counts one reconcile in route_controller_route_sync_total,
// its outcome derived as upstream's recordRouteSync does.
func (m *metrics) routeSync(routesChanged bool, err error, trigger string) {
	outcome := outcomeNoop
	switch {
	case err != nil:
		outcome = outcomeError
	case routesChanged:
		outcome = outcomeChanged
	}
	m.routeSyncs.WithLabelValues(outcome, trigger).Inc()
}

// queuedByResync marks a node the periodic resync queues: its next sync
// counts as a periodic reconcile.
func (m *metrics) queuedByResync(node string) {
	m.mu.Lock()
	m.periodic[node] = true
	m.mu.Unlock()
}

func (m *metrics) trigger(node string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.periodic[node] {
		delete(m.periodic, node)
		return triggerPeriodic
	}
	return triggerNodeChange
}

// syncNodeCounted is syncNode counted in route_controller_route_sync_total.
// Upstream reconciles the whole cluster at once, each run counted once,
// triggered by a node change or periodic; Portside reconciles one node at
// a time, each counted once: trigger periodic when the resync queued the
// node for drift it found (or for a resync that found none, or failed to
// list), node_change when a node event did; outcome changed when a route
// was created or deleted in the cloud.
func (c *Controller) syncNodeCounted(ctx context.Context, name string) error {
	trigger := c.metrics.trigger(name)
	ch := &changes{}
	err := c.syncNode(context.WithValue(ctx, changesKey{}, ch), name)
	c.metrics.routeSync(ch.n.Load() > 0, err, trigger)
	return err
}

// changes counts the routes a sync created or deleted in the cloud.
type changes struct{ n atomic.Int32 }

type changesKey struct{}

// countChanges wraps routes to count each successful create and delete in
// the changes of the call's context, if any.
func countChanges(routes cloud.Routes) cloud.Routes {
	if routes == nil {
		return nil
	}
	return &changeCountingRoutes{Routes: routes}
}

type changeCountingRoutes struct{ cloud.Routes }

func (r *changeCountingRoutes) CreateRoute(ctx context.Context, cluster, nameHint string, route cloud.Route) error {
	err := r.Routes.CreateRoute(ctx, cluster, nameHint, route)
	if ch, ok := ctx.Value(changesKey{}).(*changes); ok && err == nil {
		ch.n.Add(1)
	}
	return err
}

func (r *changeCountingRoutes) DeleteRoute(ctx context.Context, cluster string, route cloud.Route) error {
	err := r.Routes.DeleteRoute(ctx, cluster, route)
	if ch, ok := ctx.Value(changesKey{}).(*changes); ok && err == nil {
		ch.n.Add(1)
	}
	return err
}

// RegisterMetrics registers the controller's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
