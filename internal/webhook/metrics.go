package webhook

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the webhook host. The cloud_provider_webhook_* ones are
// upstream's (k8s.io/cloud-provider/app/webhook_metrics.go): same names,
// labels and buckets, so upstream's dashboards work.
type metrics struct {
	requests *prometheus.CounterVec   // code, webhook
	latency  *prometheus.HistogramVec // code, webhook
	// fine is latency with buckets that resolve an admission in
	// milliseconds (upstream's start at 250 ms, far above a healthy call).
	fine       *prometheus.HistogramVec // code, webhook
	admissions *prometheus.CounterVec   // webhook, result
	reloads    *prometheus.CounterVec   // result
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "cloud_provider_webhook", Name: "request_total",
			Help: "Number of HTTP requests partitioned by status code.",
		}, []string{"code", "webhook"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "cloud_provider_webhook", Name: "request_duration_seconds",
			Help:    "Request latency in seconds. Broken down by status code.",
			Buckets: []float64{0.25, 0.5, 0.7, 1, 1.5, 3, 5, 10},
		}, []string{"code", "webhook"}),
		fine: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "portside", Subsystem: "webhook", Name: "request_duration_seconds",
			Help:    "Time to answer an admission review (decoding, the webhook, the cloud's answer, encoding), by status code.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1, 2.5, 5, 10},
		}, []string{"code", "webhook"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "portside", Subsystem: "webhook", Name: "admissions_total",
			Help: "Admission reviews answered, by webhook and result: allowed, patched, denied.",
		}, []string{"webhook", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "portside", Subsystem: "webhook", Name: "certificate_reloads_total",
			Help: "Changes of the serving certificate files, by result: loaded, or invalid (the previous pair is served on).",
		}, []string{"result"}),
	}
	if reg == nil {
		return m
	}
	m.requests = register(reg, m.requests)
	m.latency = register(reg, m.latency)
	m.fine = register(reg, m.fine)
	m.admissions = register(reg, m.admissions)
	m.reloads = register(reg, m.reloads)
	return m
}

// register registers c on reg, or returns the collector registered
// already (a second server on the same registry shares it).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// RegisterMetrics registers the webhook host's metrics on reg, as Serve
// does (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
