package agent

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// Metric names follow upstream's pkg/agent/metrics.
type metrics struct {
	dialDuration       prometheus.Histogram
	serverConnFailures prometheus.Counter
	dialFailures       *prometheus.CounterVec
	openServerConns    prometheus.Gauge
	knownServerCount   prometheus.Gauge
	openEndpointConns  prometheus.Gauge
	streamPackets      *prometheus.CounterVec
	packets            [8]prometheus.Counter
	leaseLists         *prometheus.CounterVec
	leaseWatches       *prometheus.CounterVec
	leaseListLatency   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	o := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "konnectivity_network_proxy", Subsystem: "agent", Name: name, Help: help}
	}
	m := &metrics{
		dialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "konnectivity_network_proxy", Subsystem: "agent",
			Name: "dial_duration_seconds", Help: "Latency of dial to the remote endpoint in seconds",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}}),
		serverConnFailures: prometheus.NewCounter(prometheus.CounterOpts(o("server_connection_failure_count", "Count of failures to connect to the proxy server."))),
		dialFailures:       prometheus.NewCounterVec(prometheus.CounterOpts(o("endpoint_dial_failure_total", "Number of failures dialing the remote endpoint, by reason (example: timeout).")), []string{"reason"}),
		openServerConns:    prometheus.NewGauge(prometheus.GaugeOpts(o("open_server_connections", "Current number of open server connections."))),
		knownServerCount:   prometheus.NewGauge(prometheus.GaugeOpts(o("known_server_count", "Current number of servers agent is trying to connect to."))),
		openEndpointConns:  prometheus.NewGauge(prometheus.GaugeOpts(o("open_endpoint_connections", "Current number of open endpoint connections."))),
		streamPackets:      prometheus.NewCounterVec(prometheus.CounterOpts(o("stream_packets_total", "Count of packets processed, by segment and packet type (example: from_client, DIAL_REQ)")), []string{"segment", "packet_type"}),
	}
	m.leaseLists = prometheus.NewCounterVec(prometheus.CounterOpts(o("lease_lists_total", "Count of server lease list calls made by the agent to the k8s apiserver, labeled by HTTP response code and reason")), []string{"http_response_code", "reason"})
	m.leaseWatches = prometheus.NewCounterVec(prometheus.CounterOpts(o("lease_watches_total", "Count of server lease watch calls made by the agent to the k8s apiserver, labeled by HTTP response code and reason")), []string{"http_response_code", "reason"})
	m.leaseListLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "konnectivity_network_proxy", Subsystem: "agent",
		Name: "lease_list_latency_seconds", Help: "Latency of server lease listing in seconds",
		Buckets: []float64{0.005, 0.025, 0.1, 0.5, 2.5, 10, 30}}, []string{"http_response_code"})
	reg.MustRegister(m.leaseLists, m.leaseWatches, m.leaseListLatency)
	reg.MustRegister(m.dialDuration, m.serverConnFailures, m.dialFailures, m.openServerConns, m.knownServerCount, m.openEndpointConns, m.streamPackets)
	for t := range m.packets {
		name := "UNKNOWN"
		if t < 7 {
			name = client.PacketType(t).String()
		}
		m.packets[t] = m.streamPackets.WithLabelValues("to_agent", name)
	}
	return m
}

// packet counts a control-stream packet from the server.
func (m *metrics) packet(t client.PacketType) {
	if t < 0 || int(t) >= 7 {
		t = 7
	}
	m.packets[t].Inc()
}

func (m *metrics) dialFailed(err error) {
	reason := "unknown"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		reason = "timeout"
	}
	m.dialFailures.WithLabelValues(reason).Inc()
}

func (a *Agent) mux(profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			http.Error(w, "Proxy agent is not ready: no server connected", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	return mux
}

// RegisterMetrics registers the proxy agent's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
