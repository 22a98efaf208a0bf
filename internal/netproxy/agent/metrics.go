package agent

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// Metric names and label sets follow upstream's pkg/agent/metrics (and
// konnectivity-client's common stream metrics).
type metrics struct {
	dialDuration       prometheus.Histogram
	serverConnFailures *prometheus.CounterVec // by direction: to_server, from_server
	dialFailures       *prometheus.CounterVec
	openServerConns    prometheus.Gauge
	knownServerCount   prometheus.Gauge
	openEndpointConns  prometheus.Gauge
	streamPackets      *prometheus.CounterVec
	streamErrors       *prometheus.CounterVec
	// Resolved once: a packet costs one atomic add.
	toAgent, fromAgent [8]prometheus.Counter
	leaseLists         *prometheus.CounterVec
	leaseWatches       *prometheus.CounterVec
	leaseListLatency   *prometheus.HistogramVec
}

// Upstream's stream segments, as seen by an agent.
const (
	segToAgent   = "to_agent"   // received from the server
	segFromAgent = "from_agent" // sent to the server
)

func newMetrics(reg prometheus.Registerer) *metrics {
	o := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "konnectivity_network_proxy", Subsystem: "agent", Name: name, Help: help}
	}
	m := &metrics{
		dialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "konnectivity_network_proxy", Subsystem: "agent",
			Name: "dial_duration_seconds", Help: "Latency of dial to the remote endpoint in seconds",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}}),
		serverConnFailures: prometheus.NewCounterVec(prometheus.CounterOpts(o("server_connection_failure_count",
			"Count of failures to send to or receive from the proxy server, labeled by the direction (from_server or to_server). DEPRECATED, please use stream_events_error_total")), []string{"direction"}),
		dialFailures:      prometheus.NewCounterVec(prometheus.CounterOpts(o("endpoint_dial_failure_total", "Number of failures dialing the remote endpoint, by reason (example: timeout).")), []string{"reason"}),
		openServerConns:   prometheus.NewGauge(prometheus.GaugeOpts(o("open_server_connections", "Current number of open server connections."))),
		knownServerCount:  prometheus.NewGauge(prometheus.GaugeOpts(o("known_server_count", "Current number of servers agent is trying to connect to."))),
		openEndpointConns: prometheus.NewGauge(prometheus.GaugeOpts(o("open_endpoint_connections", "Current number of open endpoint connections."))),
		streamPackets:     prometheus.NewCounterVec(prometheus.CounterOpts(o("stream_packets_total", "Count of packets processed, by segment and packet type (example: from_client, DIAL_REQ)")), []string{"segment", "packet_type"}),
		streamErrors: prometheus.NewCounterVec(prometheus.CounterOpts(o("stream_errors_total",
			"Count of gRPC stream errors, by segment, grpc Code, packet type. (example: from_agent, Code.Unavailable, DIAL_RSP)")), []string{"segment", "code", "packet_type"}),
	}
	m.leaseLists = prometheus.NewCounterVec(prometheus.CounterOpts(o("lease_lists_total", "Count of server lease list calls made by the agent to the k8s apiserver, labeled by HTTP response code and reason")), []string{"http_response_code", "reason"})
	m.leaseWatches = prometheus.NewCounterVec(prometheus.CounterOpts(o("lease_watches_total", "Count of server lease watch calls made by the agent to the k8s apiserver, labeled by HTTP response code and reason")), []string{"http_response_code", "reason"})
	m.leaseListLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "konnectivity_network_proxy", Subsystem: "agent",
		Name: "lease_list_latency_seconds", Help: "Latency of server lease listing in seconds",
		Buckets: []float64{0.005, 0.025, 0.1, 0.5, 2.5, 10, 30}}, []string{"http_response_code"})
	reg.MustRegister(m.leaseLists, m.leaseWatches, m.leaseListLatency)
	reg.MustRegister(m.dialDuration, m.serverConnFailures, m.dialFailures, m.openServerConns, m.knownServerCount,
		m.openEndpointConns, m.streamPackets, m.streamErrors)
	for t := range m.toAgent {
		name := "UNKNOWN"
		if t < 7 {
			name = client.PacketType(t).String()
		}
		m.toAgent[t] = m.streamPackets.WithLabelValues(segToAgent, name)
		m.fromAgent[t] = m.streamPackets.WithLabelValues(segFromAgent, name)
	}
	return m
}

func packetIndex(t client.PacketType) int {
	if t < 0 || int(t) >= 7 {
		return 7
	}
	return int(t)
}

// packet counts a packet received from the server (segment to_agent).
func (m *metrics) packet(t client.PacketType) { m.toAgent[packetIndex(t)].Inc() }

// sent counts a packet sent to the server (segment from_agent).
func (m *metrics) sent(t client.PacketType) { m.fromAgent[packetIndex(t)].Inc() }

// sendFailed and recvFailed count a stream error as upstream's agent
// does: in stream_errors_total and, deprecated, in
// server_connection_failure_count. The end of a stream the agent itself
// closed, or a per-connection stream the server reset to close it
// (Canceled), is not an error.
func (m *metrics) sendFailed(err error, t client.PacketType) {
	if countable(err) {
		m.serverConnFailures.WithLabelValues("to_server").Inc()
		m.streamErrors.WithLabelValues(segFromAgent, status.Code(err).String(), t.String()).Inc()
	}
}

func (m *metrics) recvFailed(err error) {
	if countable(err) {
		m.serverConnFailures.WithLabelValues("from_server").Inc()
		m.streamErrors.WithLabelValues(segToAgent, status.Code(err).String(), "Unknown").Inc()
	}
}

// counted counts a sent *client.Packet or *netproxy.OutData (DATA), and
// returns the send's error.
func (m *metrics) counted(msg any, err error) error {
	t := client.PacketType_DATA
	if p, ok := msg.(*client.Packet); ok {
		t = p.Type
	}
	m.sent(t)
	if err != nil {
		m.sendFailed(err, t)
	}
	return err
}

func countable(err error) bool {
	return err != nil && err != io.EOF && status.Code(err) != codes.Canceled
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
	mux.Handle("/metrics", a.metricsHandler)
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	return mux
}

// RegisterMetrics registers the proxy agent's metrics on reg, as New does
// (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
