package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
)

// httpFrontend is a hijacked HTTP CONNECT connection.
type httpFrontend struct {
	conn      net.Conn
	closeOnce sync.Once
	m         *metrics
	writes    *handoff // the agent side's hand-off to this client
}

func (f *httpFrontend) close()       { f.closeOnce.Do(func() { _ = f.conn.Close() }) }
func (f *httpFrontend) kind() string { return "http-connect" }

func (f *httpFrontend) dialed(*conn) error {
	defer f.m.frontendWrote(time.Now())
	_, err := f.conn.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n"))
	return err
}

func (f *httpFrontend) dialFailed(_ *conn, msg string) {
	defer f.m.frontendWrote(time.Now())
	code := dialErrorStatus(msg)
	_, _ = fmt.Fprintf(f.conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%s\r\n", code, http.StatusText(code), msg)
	f.close()
}

func (f *httpFrontend) data(msg *netproxy.Received) error {
	start := time.Now()
	f.writes.begin(start)
	_, err := f.conn.Write(msg.GetData().GetData())
	f.writes.end()
	f.m.frontendWrote(start)
	return err
}

func (f *httpFrontend) dataOut(o *netproxy.OutData) error {
	start := time.Now()
	f.writes.begin(start)
	_, err := f.conn.Write(o.Buf())
	f.writes.end()
	f.m.frontendWrote(start)
	return err
}

func (f *httpFrontend) closed(*conn, string) { f.close() }

// httpConnect serves HTTP CONNECT tunnels, kube-apiserver's other egress
// transport.
type httpConnect struct{ s *Server }

func (h httpConnect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	s.m.httpConnections.Inc()
	defer s.m.httpConnections.Dec()
	if r.Method != http.MethodConnect {
		http.Error(w, "this proxy only supports CONNECT passthrough", http.StatusMethodNotAllowed)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "hijacking not supported", http.StatusInternalServerError)
		return
	}
	nc, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	// The server's read and write deadlines were for the CONNECT request;
	// the tunnel lives as long as its streams.
	_ = nc.SetDeadline(time.Time{})
	s.trackHTTP(nc, true)
	defer s.trackHTTP(nc, false)
	writes, unwatch := s.m.fullRecv.watch(methodConnect)
	defer unwatch()
	fe := &httpFrontend{conn: nc, m: s.m, writes: writes}
	defer fe.close()
	c, err := s.dial(fe, rand.Int64(), "tcp", r.Host)
	if err != nil {
		_, _ = fmt.Fprintf(nc, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\ncurrently no tunnels available: %v\r\n", err)
		return
	}
	<-c.dialDone
	if state, _, _ := c.snapshot(); state != stateEstablished {
		return
	}
	s.pumpFromHTTP(c, rw.Reader, nc)
}

// pumpFromHTTP moves client bytes to the agent until the client closes:
// first what the HTTP server read past the CONNECT request, then from the
// connection itself.
func (s *Server) pumpFromHTTP(c *conn, br *bufio.Reader, nc net.Conn) {
	_, connectID, _ := c.snapshot()
	out := netproxy.NewOutData(connectID)
	defer func() { out.Free() }()
	tc, _ := nc.(*tls.Conn)
	for {
		buf := out.Buf()
		var n int
		var err error
		if br != nil && br.Buffered() > 0 {
			n, err = br.Read(buf[:min(br.Buffered(), len(buf))])
		} else {
			br = nil
			n, err = nc.Read(buf)
			if tc != nil && err == nil && n >= maxTLSRecord {
				n, err = readBuffered(tc, buf, n)
			}
		}
		if n > 0 {
			s.m.packet(segToAgent, client.PacketType_DATA)
			var msg any = netproxy.Data(connectID, buf[:n]) // small: copied by Marshal
			if n >= smallData {
				// Sent from its buffer: gRPC keeps a reference until written.
				out.SetLen(n)
				msg = out
			}
			serr := c.toAgent(msg)
			if n >= smallData {
				out.Free()
				out = netproxy.NewOutData(connectID)
			}
			if serr != nil {
				if c.finish() {
					s.connFinished()
					c.closeDone()
				}
				return
			}
		}
		if err != nil {
			s.frontendGone(c)
			return
		}
	}
}

// smallData: payloads below this are copied into their packet, larger
// ones sent from their own pooled buffer.
const smallData = 4 << 10

// maxTLSRecord is the most plaintext one TLS record carries.
const maxTLSRecord = 16 << 10

// readBuffered appends to buf[:n] the records tc has already received,
// without waiting for the network: a tls.Conn returns one record (at most
// 16 KiB) per Read, so a bulk sender would otherwise cost a DATA packet,
// and an agent wake-up and write, per record. tls.Conn has no Buffered;
// a read deadline in the past makes every Read that would touch the
// socket fail at once (a timeout, which does not break the tls.Conn),
// while records already in its input buffer are still returned.
func readBuffered(tc *tls.Conn, buf []byte, n int) (int, error) {
	if tc.SetReadDeadline(time.Unix(1, 0)) != nil {
		return n, nil
	}
	var err error
	for n+maxTLSRecord <= len(buf) {
		var m int
		m, err = tc.Read(buf[n:])
		n += m
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				err = nil
			}
			break
		}
	}
	if derr := tc.SetReadDeadline(time.Time{}); derr != nil && err == nil {
		err = derr
	}
	return n, err
}

// dialErrorStatus maps an agent's dial error to an HTTP status, like
// upstream: timeouts are 504, exhausted resources 503, the rest 502.
func dialErrorStatus(msg string) int {
	switch {
	case containsFold(msg, "timeout"), containsFold(msg, "deadline exceeded"):
		return http.StatusGatewayTimeout
	case containsFold(msg, "too many open files"):
		return http.StatusServiceUnavailable
	default:
		return http.StatusBadGateway
	}
}
