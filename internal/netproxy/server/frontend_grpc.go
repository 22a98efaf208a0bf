package server

import (
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
)

// defaultCloseWait bounds how long a frontend's CLOSE_REQ waits for the
// agent's CLOSE_RSP before the stream is let go (the konnectivity client
// itself gives up after 10s).
const defaultCloseWait = 10 * time.Second

// proxyService implements ProxyService for kube-apiserver.
type proxyService struct {
	client.UnimplementedProxyServiceServer
	s *Server
}

type grpcFrontend struct {
	mu     sync.Mutex
	stream client.ProxyService_ProxyServer
	m      *metrics
	// writes is the agent side's hand-off to this frontend
	// (full_receive_channels{service_method="Connect"}).
	writes *handoff
}

func (f *grpcFrontend) send(pkt *client.Packet) error {
	f.m.packet(segToClient, pkt.Type)
	start := time.Now()
	f.writes.begin(start)
	f.mu.Lock()
	err := f.stream.Send(pkt)
	f.mu.Unlock()
	f.writes.end()
	f.wrote(start, err, pkt.Type)
	return err
}

// wrote observes a write to the frontend, as upstream: its duration
// (lock wait included) and, when it failed, the stream error.
func (f *grpcFrontend) wrote(start time.Time, err error, t client.PacketType) {
	f.m.frontendWrote(start)
	if err != nil {
		f.m.streamError(segToClient, err, t.String())
	}
}

// sendSoon is send for best-effort answers (CLOSE_RSP, a failed DIAL_RSP):
// when another send has been blocked for a while the frontend is not
// reading, so it would not read this either, and waiting would hold the
// caller (an agent's shared stream, or the handler that must return to
// release the stream).
func (f *grpcFrontend) sendSoon(pkt *client.Packet) {
	for deadline := time.Now().Add(time.Second); !f.mu.TryLock(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || f.stream.Context().Err() != nil {
			return
		}
	}
	defer f.mu.Unlock()
	f.m.packet(segToClient, pkt.Type)
	start := time.Now()
	f.wrote(start, f.stream.Send(pkt), pkt.Type)
}

func (f *grpcFrontend) kind() string { return "grpc" }

func (f *grpcFrontend) dialed(c *conn) error {
	return f.send(netproxy.DialRsp(c.random, c.connectID, ""))
}

func (f *grpcFrontend) dialFailed(c *conn, msg string) {
	f.sendSoon(netproxy.DialRsp(c.random, 0, msg))
}

func (f *grpcFrontend) data(msg *netproxy.Received) error {
	start := time.Now()
	f.writes.begin(start)
	f.mu.Lock()
	// The connectID is the agent's on both sides: forwarded as received.
	err := f.stream.SendMsg(msg)
	f.mu.Unlock()
	f.writes.end()
	f.wrote(start, err, client.PacketType_DATA)
	return err
}
func (f *grpcFrontend) dataOut(o *netproxy.OutData) error {
	start := time.Now()
	f.writes.begin(start)
	f.mu.Lock()
	err := f.stream.SendMsg(o)
	f.mu.Unlock()
	f.writes.end()
	f.wrote(start, err, client.PacketType_DATA)
	return err
}

func (f *grpcFrontend) closed(c *conn, msg string) {
	f.sendSoon(netproxy.CloseRsp(c.connectID, msg))
}

// Proxy serves one frontend tunnel. The konnectivity client dials once per
// tunnel; a second DIAL_REQ is refused rather than multiplexed.
func (p proxyService) Proxy(stream client.ProxyService_ProxyServer) error {
	s := p.s
	s.m.proxyConns.Inc()
	defer s.m.proxyConns.Dec()
	writes, unwatchWrites := s.m.fullRecv.watch(methodConnect)
	defer unwatchWrites()
	reads, unwatchReads := s.m.fullRecv.watch(methodProxy)
	defer unwatchReads()
	fe := &grpcFrontend{stream: stream, m: s.m, writes: writes}
	logger := s.logger
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		if ua := md.Get("user-agent"); len(ua) > 0 {
			logger = logger.WithValues("userAgent", ua[0])
		}
	}
	var c *conn
	var rp netproxy.Received
	defer rp.Free()
	for {
		rp.Free() // the previous packet was consumed synchronously
		err := netproxy.RecvPacket(stream, &rp)
		pkt := rp.Packet
		if err != nil {
			s.m.streamError(segFromClient, err, "")
			if c != nil {
				s.frontendGone(c)
			}
			return nil
		}
		s.m.packet(segFromClient, pkt.Type)
		switch pkt.Type {
		case client.PacketType_DIAL_REQ:
			r := pkt.GetDialRequest()
			if r == nil {
				continue
			}
			if c != nil {
				_ = fe.send(netproxy.DialRsp(r.Random, 0, "only one dial per tunnel is supported"))
				continue
			}
			c, err = s.dial(fe, r.Random, r.Protocol, r.Address)
			if err != nil {
				logger.V(2).Info("Dial refused", "address", r.Address, "err", err)
				_ = fe.send(netproxy.DialRsp(r.Random, 0, err.Error()))
				return nil
			}
		case client.PacketType_DATA:
			d := pkt.GetData()
			state, connectID, _ := stateOf(c)
			if d == nil || state != stateEstablished || d.ConnectID != connectID {
				id := int64(0)
				if d != nil {
					id = d.ConnectID
				}
				_ = fe.send(netproxy.CloseRsp(id, "DATA for a connection this tunnel has not established"))
				if c != nil {
					s.frontendGone(c)
				}
				return nil
			}
			s.m.packet(segToAgent, pkt.Type)
			// Same connectID on both sides: forwarded as received.
			reads.begin(time.Now())
			err := c.toAgent(&rp)
			reads.end()
			if err != nil {
				if c.finish() {
					s.connFinished()
					c.fe.closed(c, "agent connection lost")
					c.closeDone()
				}
			}
		case client.PacketType_CLOSE_REQ:
			r := pkt.GetCloseRequest()
			state, connectID, _ := stateOf(c)
			if r == nil || c == nil || state == statePending || r.ConnectID != connectID {
				id := int64(0)
				if r != nil {
					id = r.ConnectID
				}
				_ = fe.send(netproxy.CloseRsp(id, "unknown connection"))
				continue
			}
			if state == stateFinished {
				// Already closed from the agent side; the client still wants its answer.
				_ = fe.send(netproxy.CloseRsp(r.ConnectID, ""))
				continue
			}
			s.closeFromFrontend(c)
			select {
			case <-c.done:
			case <-stream.Context().Done():
			case <-time.After(s.closeWait):
			}
			return nil
		case client.PacketType_DIAL_CLS:
			r := pkt.GetCloseDial()
			if r != nil && c != nil && r.Random == c.random {
				s.abandonDial(c)
				return nil
			}
		default:
			logger.V(5).Info("Ignoring packet from frontend", "type", pkt.Type)
		}
	}
}

func stateOf(c *conn) (connState, int64, connStream) {
	if c == nil {
		return stateFinished, 0, nil
	}
	return c.snapshot()
}
