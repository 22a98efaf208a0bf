package node

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	initLatency prometheus.Histogram
	inits       *prometheus.CounterVec
	addrUpdates prometheus.Counter
}

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
	}
	if reg != nil {
		reg.MustRegister(m.initLatency, m.inits, m.addrUpdates)
	}
	return m
}
