package server

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
)

// httpFrontend is a hijacked HTTP CONNECT connection.
type httpFrontend struct {
	conn      net.Conn
	closeOnce sync.Once
}

func (f *httpFrontend) close()       { f.closeOnce.Do(func() { _ = f.conn.Close() }) }
func (f *httpFrontend) kind() string { return "http-connect" }

func (f *httpFrontend) dialed(*conn) error {
	_, err := f.conn.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n"))
	return err
}

func (f *httpFrontend) dialFailed(_ *conn, msg string) {
	code := dialErrorStatus(msg)
	_, _ = fmt.Fprintf(f.conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%s\r\n", code, http.StatusText(code), msg)
	f.close()
}

func (f *httpFrontend) data(pkt *client.Packet) error {
	_, err := f.conn.Write(pkt.GetData().GetData())
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
	s.trackHTTP(nc, true)
	defer s.trackHTTP(nc, false)
	fe := &httpFrontend{conn: nc}
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
	s.pumpFromHTTP(c, rw.Reader)
}

// pumpFromHTTP moves client bytes to the agent until the client closes.
func (s *Server) pumpFromHTTP(c *conn, r *bufio.Reader) {
	_, connectID, _ := c.snapshot()
	bufp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bufp)
	buf := *bufp
	for {
		n, err := r.Read(buf)
		if n > 0 {
			s.m.packet(segToAgent, client.PacketType_DATA)
			if c.toAgent(netproxy.Data(connectID, buf[:n])) != nil {
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

var copyBufs = sync.Pool{New: func() any { b := make([]byte, netproxy.CopyBufSize); return &b }}

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
