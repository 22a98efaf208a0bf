package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

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

	nodeSync *pass
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
	}
	m.nodeSync = &pass{observe: m.nodeSyncLatency.Observe}
	if reg != nil {
		reg.MustRegister(m.lbSyncs, m.nodeSyncErrors, m.nodeSyncLatency, m.updateHostLatency)
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
	err := c.cfg.LoadBalancers.UpdateLoadBalancerHosts(ctx, spec, hosts)
	c.metrics.updateHostLatency.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, cloud.ErrImplementedElsewhere) {
		c.metrics.nodeSyncErrors.Inc()
	}
	return err
}

// beginNodeSync starts timing a node sync (nodesync_latency_seconds): the
// host set changed and the Services that want a load balancer, svcs
// filtered, are about to be queued. It ends when each was synced once.
func (c *Controller) beginNodeSync(svcs []*corev1.Service) {
	c.metrics.nodeSync.begin()
	defer c.metrics.nodeSync.end()
	for _, svc := range svcs {
		if WantsLoadBalancer(svc, c.cfg.Class) {
			c.metrics.nodeSync.add(serviceKey(svc.Namespace, svc.Name))
		}
	}
}

// pass times upstream's syncNodes in a queue-driven controller: a pass
// begins when the keys are queued and ends when each of them has been
// processed once since (successfully or not, as upstream's syncNodes ends
// whatever each load balancer update gave; failures are retried after).
// A pass that begins while the previous one is still running joins it, so
// one observation covers both (upstream's node syncs never overlap
// either). A pass with no key is observed at once, as upstream's syncNodes
// with no load balancer.
type pass struct {
	observe func(float64)

	mu      sync.Mutex
	active  bool
	filling bool
	start   time.Time
	pending map[string]struct{}
}

// begin starts (or joins) a pass; add each key before queueing it, then end.
func (p *pass) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active {
		p.active, p.start, p.pending = true, time.Now(), map[string]struct{}{}
	}
	p.filling = true
}

func (p *pass) add(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active {
		p.pending[key] = struct{}{}
	}
}

// end says every key of the pass is queued.
func (p *pass) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filling = false
	p.finishIfDone()
}

// done records that key was processed by a sync that started at started.
func (p *pass) done(key string, started time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active || started.Before(p.start) {
		return // a sync from before the pass: the key is processed again
	}
	delete(p.pending, key)
	p.finishIfDone()
}

func (p *pass) finishIfDone() {
	if p.active && !p.filling && len(p.pending) == 0 {
		p.observe(time.Since(p.start).Seconds())
		p.active, p.pending = false, nil
	}
}

// track wraps a sync function to report its keys done to the pass.
func (p *pass) track(sync func(context.Context, string) error) func(context.Context, string) error {
	return func(ctx context.Context, key string) error {
		started := time.Now()
		defer p.done(key, started)
		return sync(ctx, key)
	}
}
