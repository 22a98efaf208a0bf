package server

import (
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// Metric names follow upstream's pkg/server/metrics so dashboards and
// alerts written for konnectivity keep working.
const (
	metricsNamespace = "konnectivity_network_proxy"
	metricsSubsystem = "server"
)

// Dial failure reasons, upstream's label values.
const (
	failNoAgent       = "no_agent"
	failErrorResponse = "error_response"
	failUnrecognized  = "unrecognized_response"
	failSendResponse  = "send_rsp"
	failBackendClose  = "backend_close"
	failFrontendClose = "frontend_close"
	failTimeout       = "timeout"
)

// Packet segments, upstream's label values.
const (
	segFromClient = iota
	segToClient
	segFromAgent
	segToAgent
	numSegments
)

var segmentNames = [numSegments]string{"from_client", "to_client", "from_agent", "to_agent"}

// allDialFailures are the reasons dial_failure_count starts with at 0, so
// a rate() over them works before the first failure.
var allDialFailures = []string{failNoAgent, failErrorResponse, failUnrecognized, failSendResponse, failBackendClose, failFrontendClose, failTimeout}

// upstreamLatencyBuckets are upstream's (10 ns to 12.5 s), for the
// histograms Portside adds under upstream's names.
var upstreamLatencyBuckets = []float64{0.000001, 0.00001, 0.0001, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5}

const numPacketTypes = 7

type metrics struct {
	dialDuration      prometheus.Histogram
	grpcConnections   *prometheus.GaugeVec
	httpConnections   prometheus.Gauge
	readyBackendConns prometheus.Gauge
	readyBackends     *prometheus.GaugeVec
	pendingDials      prometheus.Gauge
	established       prometheus.Gauge
	dialFailures      *prometheus.CounterVec
	streamPackets     *prometheus.CounterVec
	streamErrors      *prometheus.CounterVec
	frontendWrite     prometheus.Histogram
	fullRecv          *stallGauge
	// Lease controller (leases.go), upstream's names and labels.
	culledLeases      prometheus.Counter
	leaseDeleteTime   *prometheus.HistogramVec
	leaseDeletes      *prometheus.CounterVec
	leaseListTime     *prometheus.HistogramVec
	leaseLists        *prometheus.CounterVec
	streamsV1Backends prometheus.Gauge
	linkBackends      prometheus.Gauge
	agentHandshakes   prometheus.Counter
	identifiersDenied *prometheus.CounterVec
	revoked           prometheus.Counter
	// Flood resistance of the agent port (reviewcache.go, admission.go).
	tokenReviews    *prometheus.CounterVec
	reviewCacheHits prometheus.Counter
	reviewShared    prometheus.Counter
	streamsRefused  *prometheus.CounterVec
	// grpc_connections children, resolved once.
	proxyConns, connectConns prometheus.Gauge
	packets                  [numSegments][numPacketTypes + 1]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help}
	}
	m := &metrics{
		dialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "dial_duration_seconds", Help: "Latency of dial to the remote endpoint in seconds",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
		grpcConnections:   prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("grpc_connections", "Number of current grpc connections, partitioned by service method.")), []string{"service_method"}),
		httpConnections:   prometheus.NewGauge(prometheus.GaugeOpts(opts("http_connections", "Number of current HTTP CONNECT connections"))),
		readyBackendConns: prometheus.NewGauge(prometheus.GaugeOpts(opts("ready_backend_connections", "Number of konnectivity agent connected to the proxy server. DEPRECATED, please use ready_backends"))),
		readyBackends:     prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("ready_backends", "Number of konnectivity agent connected to the proxy server")), []string{"proxy_strategy"}),
		pendingDials:      prometheus.NewGauge(prometheus.GaugeOpts(opts("pending_backend_dials", "Current number of pending backend dial requests"))),
		established:       prometheus.NewGauge(prometheus.GaugeOpts(opts("established_connections", "Current number of established end-to-end connections (post-dial)."))),
		dialFailures:      prometheus.NewCounterVec(prometheus.CounterOpts(opts("dial_failure_count", "Number of dial failures observed. Multiple failures can occur for a single dial request.")), []string{"reason"}),
		streamPackets:     prometheus.NewCounterVec(prometheus.CounterOpts(opts("stream_packets_total", "Count of packets processed, by segment and packet type (example: from_client, DIAL_REQ)")), []string{"segment", "packet_type"}),
		streamErrors:      prometheus.NewCounterVec(prometheus.CounterOpts(opts("stream_errors_total", "Count of gRPC stream errors, by segment, grpc Code, packet type. (example: from_agent, Code.Unavailable, DIAL_RSP)")), []string{"segment", "code", "packet_type"}),
		frontendWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "frontend_write_duration_seconds", Help: "Latency of write to the frontend in seconds", Buckets: upstreamLatencyBuckets}),
		fullRecv: newStallGauge(prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("full_receive_channels",
			"Number of current connections blocked by a full receive channel, partitioned by service method. "+
				"Portside has no receive channels: streams whose reader has been blocked over 100ms handing a packet on to the other side.")),
			[]string{"service_method"})),
		culledLeases: prometheus.NewCounter(prometheus.CounterOpts(opts("culled_leases_count", "Count of expired leases that the lease garbage collection controller has culled."))),
		leaseDeleteTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "lease_delete_latency_seconds", Help: "Latency of lease deletion calls by the garbage collection controller in seconds.",
			Buckets: upstreamLatencyBuckets}, []string{"http_status_code"}),
		leaseDeletes: prometheus.NewCounterVec(prometheus.CounterOpts(opts("lease_delete_total", "Count of lease deletion calls by the garbage collection controller. Labeled by HTTP status code and reason.")),
			[]string{"http_status_code", "reason"}),
		leaseListTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "lease_list_latency_seconds", Help: "Latency of lease list calls by the garbage collection controller in seconds.",
			Buckets: upstreamLatencyBuckets}, []string{"http_status_code"}),
		leaseLists: prometheus.NewCounterVec(prometheus.CounterOpts(opts("lease_list_total", "Count of lease list calls made by the garbage collection controller. Labeled by HTTP status code and reason.")),
			[]string{"http_status_code", "reason"}),
		streamsV1Backends: prometheus.NewGauge(prometheus.GaugeOpts(opts("portside_streams_v1_backends", "Number of connected agents using Portside's per-connection streams (no head-of-line blocking)."))),
		linkBackends: prometheus.NewGauge(prometheus.GaugeOpts(opts("portside_link_backends",
			"Number of connected agents on portside-link/2, the lean framed link (no gRPC between server and agent)."))),
		agentHandshakes: prometheus.NewCounter(prometheus.CounterOpts(opts("portside_agent_handshake_failures_total", "Number of TLS handshakes on the agent port that failed (e.g. an agent without a valid client certificate)."))),
		identifiersDenied: prometheus.NewCounterVec(prometheus.CounterOpts(opts("portside_agent_identifiers_denied_total",
			"Number of agent identifiers ignored because the agent's credential does not allow them, by identifier kind and reason.")), []string{"kind", "reason"}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts(opts("portside_connections_revoked_total",
			"Number of connections (pending or established) closed because the agent carrying them no longer holds their destination: its Node stopped listing it, was deleted, or another Node lists it too."))),
		tokenReviews: prometheus.NewCounterVec(prometheus.CounterOpts(opts("portside_token_reviews_total",
			"Number of TokenReviews of agent tokens sent to the apiserver, by result (authenticated, denied, error).")), []string{"result"}),
		reviewCacheHits: prometheus.NewCounter(prometheus.CounterOpts(opts("portside_token_review_cache_hits_total",
			"Number of agent streams whose token was answered by a cached review (authentications and, briefly, denials)."))),
		reviewShared: prometheus.NewCounter(prometheus.CounterOpts(opts("portside_token_review_shared_total",
			"Number of agent streams that waited for a review of the same token already in flight instead of sending their own."))),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts(opts("portside_agent_streams_refused_total",
			"Number of agent streams refused before authentication, by reason (per_connection, per_unauthenticated_peer, reviews_busy).")), []string{"reason"}),
	}
	reg.MustRegister(m.identifiersDenied, m.revoked, m.tokenReviews, m.reviewCacheHits, m.reviewShared, m.streamsRefused)
	reg.MustRegister(m.dialDuration, m.grpcConnections, m.httpConnections, m.readyBackendConns, m.readyBackends,
		m.pendingDials, m.established, m.dialFailures, m.streamPackets, m.streamErrors, m.streamsV1Backends, m.linkBackends, m.agentHandshakes,
		m.frontendWrite, m.fullRecv.vec, m.culledLeases, m.leaseDeleteTime, m.leaseDeletes, m.leaseListTime, m.leaseLists)
	for _, r := range allDialFailures {
		m.dialFailures.WithLabelValues(r)
	}
	m.proxyConns = m.grpcConnections.WithLabelValues("Proxy")
	m.connectConns = m.grpcConnections.WithLabelValues("Connect")
	// Resolve the per-packet counters once: the hot path then costs one
	// atomic add, not a label lookup.
	for s := range numSegments {
		for t := range numPacketTypes + 1 {
			name := "UNKNOWN"
			if t < numPacketTypes {
				name = client.PacketType(t).String()
			}
			m.packets[s][t] = m.streamPackets.WithLabelValues(segmentNames[s], name)
		}
	}
	return m
}

func (m *metrics) packet(seg int, t client.PacketType) {
	if t < 0 || int(t) >= numPacketTypes {
		t = numPacketTypes
	}
	m.packets[seg][t].Inc()
}

func (m *metrics) dialFailed(reason string) { m.dialFailures.WithLabelValues(reason).Inc() }

// streamError counts a failed Send or Recv on a gRPC stream, as upstream
// does: by the gRPC code, and the packet type ("Unknown" for a Recv).
// The end of a stream (io.EOF) is no error.
func (m *metrics) streamError(seg int, err error, t string) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	if t == "" {
		t = "Unknown"
	}
	m.streamErrors.WithLabelValues(segmentNames[seg], status.Code(err).String(), t).Inc()
}

// frontendWrote observes one write to a frontend that began at start.
func (m *metrics) frontendWrote(start time.Time) {
	m.frontendWrite.Observe(time.Since(start).Seconds())
}

// leaseCall observes a lease list or delete of the lease collector: the
// HTTP status (200 on success) and the apiserver's reason, as upstream.
func (m *metrics) leaseCall(total *prometheus.CounterVec, latency *prometheus.HistogramVec, err error, took time.Duration) {
	code, reason := 200, ""
	if err != nil {
		var st apierrors.APIStatus
		if !errors.As(err, &st) {
			return // not an apiserver answer (upstream does not count it either)
		}
		code, reason = int(st.Status().Code), string(st.Status().Reason)
	}
	total.WithLabelValues(strconv.Itoa(code), reason).Inc()
	latency.WithLabelValues(strconv.Itoa(code)).Observe(took.Seconds())
}

func (m *metrics) dialOK(start time.Time) { m.dialDuration.Observe(time.Since(start).Seconds()) }

// RegisterMetrics registers the proxy server's metrics on reg, as New
// does (for docs/reference/metrics.md).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
