package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy"
)

// dial connects to a destination and answers the server.
func (s *session) dial(r *client.DialRequest) {
	logger := s.logger.WithValues("dialID", r.Random, "address", r.Address)
	s.a.liveConns.Add(1)
	defer s.a.liveConns.Add(-1)
	ctx, cancel := context.WithTimeout(s.ctx, s.a.opts.DialTimeout)
	s.mu.Lock()
	s.dials[r.Random] = cancel
	s.mu.Unlock()
	start := time.Now()
	var d net.Dialer
	nc, err := d.DialContext(ctx, r.Protocol, r.Address)
	s.mu.Lock()
	delete(s.dials, r.Random)
	s.mu.Unlock()
	cancel()
	if err != nil {
		s.a.m.dialFailed(err)
		logger.V(2).Info("Dial failed", "err", err)
		_ = s.send(netproxy.DialRsp(r.Random, 0, err.Error()))
		return
	}
	s.a.m.dialDuration.Observe(time.Since(start).Seconds())
	connID := s.nextID.Add(1)
	s.a.m.openEndpointConns.Inc()
	defer s.a.m.openEndpointConns.Dec()
	if s.v1.Load() {
		err := s.serveOwnStream(nc, r.Random, connID, logger)
		if err == nil {
			return
		}
		// The connection's stream was not taken: fail the dial now, on the
		// control stream (the frontend would otherwise wait for its
		// timeout), and carry this server's next connections there.
		_ = nc.Close()
		_ = s.send(netproxy.DialRsp(r.Random, 0, "proxy agent: the connection's stream did not reach this server: "+err.Error()))
		if s.ack && s.v1.Swap(false) {
			logger.Info("Falling back to one stream for all connections to this server: a connection stream reached a server "+
				"without this agent's session (an L7 proxy between agents and servers? the agent port must be L4, see docs/network-proxy.md)",
				"err", err)
		}
		return
	}
	s.serveMuxed(nc, r.Random, connID)
}

// muxQueue is how many DATA packets a multiplexed connection may have
// queued for its destination.
const muxQueue = 16

// muxConn is a connection carried on the control stream (upstream server).
type muxConn struct {
	nc    net.Conn
	queue chan netproxy.Received // DATA, each freed once written
	done  chan struct{}          // closed when the connection is torn down
}

// serveMuxed carries a connection on the control stream (upstream server).
func (s *session) serveMuxed(nc net.Conn, random, connID int64) {
	c := &muxConn{nc: nc, queue: make(chan netproxy.Received, muxQueue), done: make(chan struct{})}
	defer close(c.done)
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[connID] = c
	s.mu.Unlock()
	if err := s.send(netproxy.DialRsp(random, connID, "")); err != nil {
		s.forget(connID)
		_ = nc.Close()
		return
	}
	go func() {
		for {
			select {
			case rp := <-c.queue:
				_, err := nc.Write(rp.GetData().GetData())
				rp.Free()
				if err != nil {
					// The reader sees the close and answers CLOSE_RSP.
					_ = nc.Close()
					return
				}
			case <-c.done:
				return
			}
		}
	}()
	pumpToServer(nc, connID, s.sendMsg)
	s.forget(connID)
	_ = nc.Close()
	_ = s.send(netproxy.CloseRsp(connID, ""))
}

func (s *session) forget(connID int64) {
	s.mu.Lock()
	delete(s.conns, connID)
	s.mu.Unlock()
}

// serveOwnStream carries a connection on a stream of its own (streams-v1):
// flow control of that stream alone throttles this connection. An error
// means the stream was not taken and nc is left to the caller.
func (s *session) serveOwnStream(nc net.Conn, random, connID int64, logger logr.Logger) error {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	md := metadata.Pairs(header.AgentID, s.a.opts.AgentID,
		netproxy.HeaderSession, s.token, netproxy.HeaderDial, strconv.FormatInt(random, 10))
	ds, err := s.client.Connect(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		logger.V(2).Info("Opening the connection stream failed", "err", err)
		return err
	}
	if s.ack {
		if err := awaitAck(ds, s.token, s.a.opts.DialTimeout, cancel); err != nil {
			return err
		}
	}
	m := s.a.m
	rsp := netproxy.DialRsp(random, connID, "")
	if err := m.counted(rsp, ds.SendMsg(rsp)); err != nil {
		return err
	}
	defer nc.Close()
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		defer cancel()
		var rp netproxy.Received
		for {
			rp.Free() // the previous payload has been written
			if err := netproxy.RecvPacket(ds, &rp); err != nil {
				if ctx.Err() == nil {
					m.recvFailed(err)
				}
				_ = nc.Close()
				return
			}
			m.packet(rp.Type)
			switch rp.Type {
			case client.PacketType_DATA:
				if _, err := nc.Write(rp.GetData().GetData()); err != nil {
					// The reader sees the close and answers CLOSE_RSP.
					_ = nc.Close()
				}
			case client.PacketType_CLOSE_REQ:
				_ = nc.Close()
			}
		}
	}()
	pumpToServer(nc, connID, func(msg any) error { return m.counted(msg, ds.SendMsg(msg)) })
	if rsp := netproxy.CloseRsp(connID, ""); m.counted(rsp, ds.SendMsg(rsp)) == nil {
		_ = ds.CloseSend()
	}
	<-wdone
	return nil
}

// awaitAck waits, up to timeout, for the server's acknowledgement of a
// connection stream (its session token in the response headers). A server
// that does not know the session refuses the stream; one that saw no
// session (a proxy stripped it) answers as to a control stream.
func awaitAck(ds grpc.ClientStream, token string, timeout time.Duration, cancel context.CancelFunc) error {
	t := time.AfterFunc(timeout, cancel)
	defer t.Stop()
	hdr, err := ds.Header()
	switch {
	case err != nil:
		return err
	case first(hdr.Get(netproxy.HeaderSession)) == token:
		return nil
	case len(hdr.Get(header.ServerID)) > 0:
		return errors.New("the server took it for a control stream (were its headers stripped?)")
	}
	// A refused stream ends with headers-only trailers: the status says why.
	if err := ds.RecvMsg(&client.Packet{}); err != nil && err != io.EOF {
		return err
	}
	return errors.New("the server did not acknowledge the stream")
}

// smallData: payloads below this are copied into their packet, larger
// ones sent from their own pooled buffer.
const smallData = 4 << 10

// pumpToServer sends what the destination writes until it closes. send
// takes a *client.Packet or a *netproxy.OutData.
func pumpToServer(nc net.Conn, connID int64, send func(any) error) {
	out := netproxy.NewOutData(connID)
	defer func() { out.Free() }()
	pkt := netproxy.Data(connID, nil)
	d := pkt.GetData()
	for {
		buf := out.Buf()
		n, err := nc.Read(buf)
		if n > 0 {
			var serr error
			if n < smallData {
				d.Data = buf[:n] // copied by Marshal
				serr = send(pkt)
			} else {
				// Sent from its buffer: gRPC keeps a reference until written.
				out.SetLen(n)
				serr = send(out)
				out.Free()
				out = netproxy.NewOutData(connID)
			}
			if serr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
