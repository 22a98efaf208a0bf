package servingcsr

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/pkg/cloud"
)

type metrics struct {
	decisions  *prometheus.CounterVec
	cloudCalls *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "serving_csr", Name: "decisions_total",
			Help: "Kubelet serving CSRs the approver decided, by decision (approved, denied) and the condition's reason.",
		}, []string{"decision", "reason"}),
		cloudCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "portside_ccm", Subsystem: "serving_csr", Name: "cloud_calls_total",
			Help: "Instance lookups of the serving CSR approver, by result (success, not_found, throttled, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.cloudCalls)
	}
	return m
}

func (m *metrics) decision(d Decision) {
	label := "approved"
	if d.Verdict == Deny {
		label = "denied"
	}
	m.decisions.WithLabelValues(label, d.Reason).Inc()
}

func (m *metrics) cloudCall(err error) {
	result := "success"
	switch _, throttled := cloud.IsRetryAfter(err); {
	case err == nil:
	case cloud.IsNotFound(err):
		result = "not_found"
	case throttled:
		result = "throttled"
	default:
		result = "error"
	}
	m.cloudCalls.WithLabelValues(result).Inc()
}

// RegisterMetrics registers the controller's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
