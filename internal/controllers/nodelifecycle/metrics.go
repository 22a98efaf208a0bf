package nodelifecycle

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/internal/controllers/queue"
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

	monitor *queue.Pass
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
	m.monitor = &queue.Pass{Observe: m.monitorDuration.Observe}
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

// RegisterMetrics registers the controller's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
