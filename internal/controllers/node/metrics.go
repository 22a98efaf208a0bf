package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	initLatency prometheus.Histogram
	inits       *prometheus.CounterVec
	addrUpdates prometheus.Counter

	// Upstream's names (k8s.io/cloud-provider controllers/node/metrics.go),
	// so that dashboards and alerts written for upstream's CCM work.
	taintRemovalDelay prometheus.Histogram
	initialSyncDelay  prometheus.Histogram
}

// Upstream's subsystem of the cloud node controller's metrics.
const upstreamSubsystem = "node_controller"

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		initLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "portside_ccm", Subsystem: "cloud_node",
			Name:    "initialization_seconds",
			Help:    "Seconds from a node's creation until it was initialized (taint removed).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}),
		inits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "cloud_node",
			Name: "initializations_total",
			Help: "Node initialization attempts by result (success, or the failure reason).",
		}, []string{"result"}),
		addrUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "cloud_node",
			Name: "address_updates_total",
			Help: "Periodic syncs that changed a node's addresses.",
		}),
		taintRemovalDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: upstreamSubsystem,
			Name:      "cloud_provider_taint_removal_delay_seconds",
			Help:      "Number of seconds after node creation when NodeController removed the cloud-provider taint of a single node.",
			Buckets:   prometheus.ExponentialBuckets(1, 4, 6), // 1s -> ~17m
		}),
		initialSyncDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: upstreamSubsystem,
			Name:      "initial_node_sync_delay_seconds",
			Help:      "Number of seconds after node creation when NodeController finished the initial synchronization of a single node.",
			Buckets:   prometheus.ExponentialBuckets(1, 4, 6), // 1s -> ~17m
		}),
	}
	if reg != nil {
		reg.MustRegister(m.initLatency, m.inits, m.addrUpdates, m.taintRemovalDelay, m.initialSyncDelay)
	}
	return m
}

// upstreamInitialized observes upstream's histograms for a node just
// initialized (addresses written, then the uninitialized taint removed),
// created at created. Upstream observes them after the write that removes
// the taint and after its follow-up address update; Portside writes the
// addresses first and the taint last, so both are done at this point.
func (m *metrics) upstreamInitialized(created time.Time) {
	since := time.Since(created).Seconds()
	m.taintRemovalDelay.Observe(since)
	m.initialSyncDelay.Observe(since)
}

// RegisterMetrics registers the controller's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
