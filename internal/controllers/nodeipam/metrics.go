package nodeipam

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	allocations *prometheus.CounterVec
}

// usageCollector reports the allocator's state when scraped, so the gauges
// never drift from the bitmap.
type usageCollector struct {
	used, size *prometheus.Desc
	usage      func() map[string][2]int
}

func (u *usageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- u.used; ch <- u.size }

func (u *usageCollector) Collect(ch chan<- prometheus.Metric) {
	for cidr, v := range u.usage() {
		ch <- prometheus.MustNewConstMetric(u.used, prometheus.GaugeValue, float64(v[0]), cidr)
		ch <- prometheus.MustNewConstMetric(u.size, prometheus.GaugeValue, float64(v[1]), cidr)
	}
}

func newMetrics(reg prometheus.Registerer, usage func() map[string][2]int) *metrics {
	m := &metrics{allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "portside_ccm", Subsystem: "nodeipam", Name: "allocations_total",
		Help: "Pod CIDR assignments by result: success, exhausted (cluster CIDR full), unavailable (cloud has none), error.",
	}, []string{"result"})}
	if reg != nil {
		reg.MustRegister(m.allocations, &usageCollector{
			used:  prometheus.NewDesc("portside_ccm_nodeipam_cidrs_used", "Node subnets in use per cluster CIDR (including the service range).", []string{"cluster_cidr"}, nil),
			size:  prometheus.NewDesc("portside_ccm_nodeipam_cidrs_total", "Node subnets per cluster CIDR.", []string{"cluster_cidr"}, nil),
			usage: usage,
		})
	}
	return m
}

// RegisterMetrics registers the controller's metrics on reg, as New does,
// with usage standing for the allocator's state (for
// docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer, usage func() map[string][2]int) {
	newMetrics(reg, usage)
}
