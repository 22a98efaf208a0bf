package nodelifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/pkg/cloud"
)

// Upstream's subsystem of the cloud node lifecycle controller's metrics
// (k8s.io/cloud-provider controllers/nodelifecycle/metrics.go).
const upstreamSubsystem = "cloud_node_lifecycle_controller"

// Operation and result label values of
// cloud_node_lifecycle_controller_cloud_provider_calls_total, as upstream's.
const (
	opInstanceExists   = "instance_exists"
	opInstanceShutdown = "instance_shutdown"
	opInstanceMetadata = "instance_metadata"

	resultSuccess          = "success"
	resultError            = "error"
	resultInstanceNotFound = "instance_not_found"
	resultNotImplemented   = "not_implemented"
	resultCanceled         = "canceled"
)

type metrics struct {
	deleted prometheus.Counter

	// Upstream's names, so that dashboards and alerts written for
	// upstream's CCM work.
	monitorDuration prometheus.Histogram
	cloudCalls      *prometheus.CounterVec

	monitor *pass
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "cloud_node_lifecycle", Name: "deleted_nodes_total",
			Help: "Nodes deleted because the cloud reported their instance gone.",
		}),
		monitorDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: upstreamSubsystem,
			Name:      "monitor_nodes_duration_seconds",
			Help:      "A metric measuring the duration in seconds of a single MonitorNodes loop execution.",
			Buckets:   prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		cloudCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: upstreamSubsystem,
			Name:      "cloud_provider_calls_total",
			Help:      "The total number of cloud provider API calls, labeled by operation and result.",
		}, []string{"operation", "result"}),
	}
	m.monitor = &pass{observe: m.monitorDuration.Observe}
	if reg != nil {
		reg.MustRegister(m.deleted, m.monitorDuration, m.cloudCalls)
	}
	return m
}

// observeCall counts one cloud call of the controller, with upstream's
// result values.
func (m *metrics) observeCall(operation string, err error) {
	result := resultSuccess
	switch {
	case cloud.IsNotImplemented(err):
		result = resultNotImplemented
	case cloud.IsNotFound(err):
		result = resultInstanceNotFound
	case errors.Is(err, context.Canceled):
		result = resultCanceled
	case err != nil:
		result = resultError
	}
	m.cloudCalls.WithLabelValues(operation, result).Inc()
}

// instances returns inst with every call counted in cloud_provider_calls_total.
func (m *metrics) instances(inst cloud.Instances) cloud.Instances {
	if inst == nil {
		return nil
	}
	return &countedInstances{Instances: inst, m: m}
}

type countedInstances struct {
	cloud.Instances
	m *metrics
}

func (c *countedInstances) InstanceMetadata(ctx context.Context, node cloud.Node) (*cloud.InstanceMetadata, error) {
	md, err := c.Instances.InstanceMetadata(ctx, node)
	c.m.observeCall(opInstanceMetadata, err)
	return md, err
}

// InstanceExists counts (false, nil), the cloud saying the instance is
// gone, as instance_not_found, as upstream does.
func (c *countedInstances) InstanceExists(ctx context.Context, node cloud.Node) (bool, error) {
	exists, err := c.Instances.InstanceExists(ctx, node)
	if err == nil && !exists {
		c.m.observeCall(opInstanceExists, cloud.ErrNotFound)
	} else {
		c.m.observeCall(opInstanceExists, err)
	}
	return exists, err
}

func (c *countedInstances) InstanceShutdown(ctx context.Context, node cloud.Node) (bool, error) {
	shutdown, err := c.Instances.InstanceShutdown(ctx, node)
	c.m.observeCall(opInstanceShutdown, err)
	return shutdown, err
}

// pass times upstream's "MonitorNodes loop" in a queue-driven controller:
// a pass begins when the period's candidates are queued and ends when each
// of them has been processed once since (successfully or not, as upstream's
// loop ends whatever each node's check gave). A pass that begins while the
// previous one is still running joins it, so one observation covers both
// (upstream's loop never overlaps itself either). A period with no
// candidate is a pass of about zero seconds, as upstream's loop over
// healthy nodes.
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
