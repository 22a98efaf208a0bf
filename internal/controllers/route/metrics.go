package route

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/pkg/cloud"
)

type metrics struct {
	ops *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{ops: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "portside_ccm", Subsystem: "route", Name: "cloud_calls_total",
		Help: "Route calls to the cloud by operation (list, create, delete) and result (success, throttled, error).",
	}, []string{"operation", "result"})}
	if reg != nil {
		reg.MustRegister(m.ops)
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
