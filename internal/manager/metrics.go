package manager

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/util/workqueue"
)

// MetricsNamespace prefixes every metric of the CCM.
const MetricsNamespace = "portside_ccm"

// NewRegistry returns the CCM's Prometheus registry: Go and process
// metrics, and the workqueue_* metrics of every named queue.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerWorkqueueMetrics(reg)
	return reg
}

var (
	workqueueOnce     sync.Once
	workqueueProvider *queueMetrics
)

// registerWorkqueueMetrics makes client-go's workqueues report to reg.
// client-go has one global provider, so the first registry wins; later
// ones (tests running several managers) share its collectors.
func registerWorkqueueMetrics(reg prometheus.Registerer) {
	workqueueOnce.Do(func() {
		workqueueProvider = newQueueMetrics()
		workqueue.SetProvider(workqueueProvider)
	})
	for _, c := range workqueueProvider.collectors() {
		_ = reg.Register(c)
	}
}

type queueMetrics struct {
	adds, retries                   *prometheus.CounterVec
	depthGauge, unfinished, longest *prometheus.GaugeVec
	latency, work                   *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	opts := func(name, help string) (string, string, string) { return MetricsNamespace, "workqueue_" + name, help }
	counter := func(name, help string) *prometheus.CounterVec {
		ns, n, h := opts(name, help)
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: n, Help: h}, []string{"name"})
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		ns, n, h := opts(name, help)
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: n, Help: h}, []string{"name"})
	}
	hist := func(name, help string) *prometheus.HistogramVec {
		ns, n, h := opts(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: n, Help: h,
			Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10)}, []string{"name"})
	}
	return &queueMetrics{
		adds:       counter("adds_total", "Items added to the queue."),
		retries:    counter("retries_total", "Items re-added for a retry."),
		depthGauge: gauge("depth", "Items waiting in the queue."),
		unfinished: gauge("unfinished_work_seconds", "Seconds of work in progress not yet done."),
		longest:    gauge("longest_running_processor_seconds", "Seconds the longest running item has been processed."),
		latency:    hist("queue_duration_seconds", "Seconds an item waits before it is processed."),
		work:       hist("work_duration_seconds", "Seconds processing an item takes."),
	}
}

func (m *queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.adds, m.retries, m.depthGauge, m.unfinished, m.longest, m.latency, m.work}
}

func (m *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depthGauge.WithLabelValues(name)
}
func (m *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}
func (m *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}
func (m *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name)
}
func (m *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}
func (m *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name)
}
func (m *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}

// RegisterWorkqueueMetrics registers a fresh set of the workqueue metrics
// NewRegistry registers (the ones every named queue reports to), without
// making them client-go's provider (for docs/reference/metrics.md).
func RegisterWorkqueueMetrics(reg prometheus.Registerer) {
	reg.MustRegister(newQueueMetrics().collectors()...)
}
