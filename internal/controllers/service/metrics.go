package service

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/controllers/queue"
	"github.com/portside-io/portside/pkg/cloud"
)

// metrics are upstream's service controller metrics (k8s.io/cloud-provider
// controllers/service/metrics.go), same names, help and buckets, so that
// dashboards and alerts written for upstream's CCM work.
type metrics struct {
	lbSyncs           prometheus.Counter
	nodeSyncErrors    prometheus.Counter
	nodeSyncLatency   prometheus.Histogram
	updateHostLatency prometheus.Histogram
	// wholeHostSets is Portside's own: host changes sent whole to a
	// provider that takes differences (hosts sharing an address).
	wholeHostSets prometheus.Counter

	nodeSync *queue.Pass
}

// Upstream's subsystem of the service controller's metrics.
const upstreamSubsystem = "service_controller"

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		lbSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: upstreamSubsystem,
			Name:      "loadbalancer_sync_total",
			Help:      "A metric counting the amount of times any load balancer has been configured, as an effect of service/node changes on the cluster",
		}),
		nodeSyncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: upstreamSubsystem,
			Name:      "nodesync_error_total",
			Help:      "A metric counting the amount of times any load balancer has been configured and errored, as an effect of node changes on the cluster",
		}),
		nodeSyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: upstreamSubsystem,
			Name:      "nodesync_latency_seconds",
			Help:      "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster node updates.",
			Buckets:   prometheus.ExponentialBuckets(1, 2, 15), // 1s to 16384s
		}),
		updateHostLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: upstreamSubsystem,
			Name:      "update_loadbalancer_host_latency_seconds",
			Help:      "A metric measuring the latency for updating each load balancer hosts.",
			Buckets:   prometheus.ExponentialBuckets(1, 2, 15), // 1s to 16384s
		}),
		wholeHostSets: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "service", Name: "whole_host_set_updates_total",
			Help: "Load balancer host changes sent as the whole host set, though the provider takes differences, because two hosts share an address (one per load balancer).",
		}),
	}
	m.nodeSync = &queue.Pass{Observe: m.nodeSyncLatency.Observe}
	if reg != nil {
		reg.MustRegister(m.lbSyncs, m.nodeSyncErrors, m.nodeSyncLatency, m.updateHostLatency, m.wholeHostSets)
	}
	return m
}

// updateHosts is UpdateLoadBalancerHosts, counted as upstream counts its
// UpdateLoadBalancer of a node sync: every call in loadbalancer_sync_total
// and update_loadbalancer_host_latency_seconds, every failure (not
// ErrImplementedElsewhere, which upstream takes as success) in
// nodesync_error_total.
func (c *Controller) updateHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, hosts []cloud.Host) error {
	c.metrics.lbSyncs.Inc()
	start := time.Now()
	// hosts is shared (the remembered host set, the key of the cached
	// differences): not copied per load balancer, as upstream shares its
	// node list; the SDK says providers only read it.
	err := c.cfg.LoadBalancers.UpdateLoadBalancerHosts(ctx, spec, hosts)
	c.metrics.updateHostLatency.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, cloud.ErrImplementedElsewhere) {
		c.metrics.nodeSyncErrors.Inc()
	}
	return err
}

// changeHosts moves the cloud's host set from prev to hosts: with a
// provider that changes hosts incrementally, only the difference (O(1)
// per load balancer for one node, the difference being computed once per
// pair of host sets), else the whole set. The whole set is sent too while
// two hosts of either set share an address (SharedAddress): a difference
// could remove the backend both stand for. Counted like updateHosts.
func (c *Controller) changeHosts(ctx context.Context, spec *cloud.LoadBalancerSpec, prev, hosts []cloud.Host) error {
	changer, ok := c.cfg.LoadBalancers.(cloud.LoadBalancerHostChanger)
	if !ok || prev == nil {
		return c.updateHosts(ctx, spec, hosts)
	}
	add, remove, whole := c.hostChanges(ctx, prev, hosts)
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	if whole {
		c.metrics.wholeHostSets.Inc()
		return c.updateHosts(ctx, spec, hosts)
	}
	c.metrics.lbSyncs.Inc()
	start := time.Now()
	err := changer.ChangeLoadBalancerHosts(ctx, spec, slices.Clone(add), slices.Clone(remove))
	c.metrics.updateHostLatency.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, cloud.ErrImplementedElsewhere) {
		c.metrics.nodeSyncErrors.Inc()
	}
	return err
}

// hostDiff is a computed HostChanges(from, to); whole is set when either
// set has a SharedAddress, and the difference must not be sent alone.
type hostDiff struct {
	from, to    []cloud.Host
	add, remove []cloud.Host
	whole       bool
}

// hostDiffsKept bounds the remembered differences: load balancers are at
// most a few host-set generations apart.
const hostDiffsKept = 4

// hostChanges is HostChanges(from, to), computed once per pair of host
// sets. A host set is shared by every load balancer synced with it and
// never modified (synced.hosts), so after a node change every load balancer
// asks for the same pair, which is recognised by identity: O(1) each
// instead of O(nodes). A pair with a shared address is logged once, when
// it is computed: the incremental saving is lost until no address is.
func (c *Controller) hostChanges(ctx context.Context, from, to []cloud.Host) (add, remove []cloud.Host, whole bool) {
	c.diffMu.Lock()
	defer c.diffMu.Unlock()
	for _, d := range c.diffs {
		if sameSlice(d.from, from) && sameSlice(d.to, to) {
			return d.add, d.remove, d.whole
		}
	}
	add, remove = HostChanges(from, to)
	shared := SharedAddress(from)
	if shared == "" {
		shared = SharedAddress(to)
	}
	whole = shared != ""
	if whole && (len(add) > 0 || len(remove) > 0) {
		klog.FromContext(ctx).Info("Two load-balancer hosts share an address: sending load balancers the whole host set until none does",
			"address", shared, "added", len(add), "removed", len(remove))
	}
	if len(c.diffs) < hostDiffsKept {
		c.diffs = append(c.diffs, hostDiff{})
	}
	copy(c.diffs[1:], c.diffs)
	c.diffs[0] = hostDiff{from: from, to: to, add: add, remove: remove, whole: whole}
	return add, remove, whole
}

// sameSlice reports whether a and b are the same slice (same array and
// length), not merely equal.
func sameSlice(a, b []cloud.Host) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// beginNodeSync starts timing a node sync (nodesync_latency_seconds): the
// host set changed and the Services that want a load balancer, svcs
// filtered, are about to be queued. It ends when each was synced once.
func (c *Controller) beginNodeSync(svcs []*corev1.Service) {
	c.metrics.nodeSync.Begin()
	defer c.metrics.nodeSync.End()
	for _, svc := range svcs {
		if WantsLoadBalancer(svc, c.cfg.Class) {
			c.metrics.nodeSync.Add(serviceKey(svc.Namespace, svc.Name))
		}
	}
}

// RegisterMetrics registers the controller's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
