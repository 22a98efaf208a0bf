package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/link"
)

// helloTimeout bounds the wait for an agent's Hello after the handshake.
const helloTimeout = 30 * time.Second

// linkSessions are the portside-link/2 agents' sessions, closed at
// shutdown as agentGRPC.Stop closes the gRPC agents' connections.
type linkSessions struct {
	mu     sync.Mutex
	closed bool
	m      map[*link.Session]struct{}
	wg     sync.WaitGroup
}

func (l *linkSessions) add(ls *link.Session) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.m == nil {
		l.m = map[*link.Session]struct{}{}
	}
	l.m[ls] = struct{}{}
	l.wg.Add(1)
	return true
}

func (l *linkSessions) remove(ls *link.Session) {
	l.mu.Lock()
	delete(l.m, ls)
	l.mu.Unlock()
	l.wg.Done()
}

// closeAll ends every session, and any that arrives later, and waits
// for their agents to be detached.
func (l *linkSessions) closeAll() {
	l.mu.Lock()
	l.closed = true
	for ls := range l.m {
		_ = ls.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// LinkAgents is how many connected agents speak portside-link/2.
func (s *Server) LinkAgents() int { return s.backends.links() }

// serveLink serves one agent on portside-link/2: its Hello is admitted,
// authenticated and named exactly as a gRPC agent's metadata (admitAgent,
// with the TLS state as the peer's), then the server dials through the
// session until it ends.
func (s *Server) serveLink(conn net.Conn, state tls.ConnectionState) {
	defer conn.Close()
	s.m.connectConns.Inc()
	defer s.m.connectConns.Dec()
	_ = conn.SetDeadline(time.Now().Add(helloTimeout))
	var hello link.Hello
	if err := link.ReadMessage(conn, &hello); err != nil {
		s.logger.V(2).Info("Agent link without a hello", "remoteAddr", conn.RemoteAddr().String(), "err", err)
		return
	}
	md := metadata.Pairs(header.AgentID, hello.AgentID)
	if hello.AgentIdentifiers != "" {
		md.Append(header.AgentIdentifiers, hello.AgentIdentifiers)
	}
	if hello.Token != "" {
		md.Append(header.AuthenticationTokenContextKey, header.AuthenticationTokenContextSchemePrefix+hello.Token)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: conn.RemoteAddr(), LocalAddr: conn.LocalAddr(), AuthInfo: tlsInfo(state)})
	ctx = metadata.NewIncomingContext(ctx, md)
	tk, b, logger, err := s.admitAgent(ctx, md)
	if err != nil {
		st, _ := status.FromError(err)
		_ = link.WriteMessage(conn, link.Welcome{Code: st.Code().String(), Refused: st.Message()})
		return
	}
	defer tk.done()
	if err := link.WriteMessage(conn, link.Welcome{ServerID: s.opts.ServerID, ServerCount: s.serverCount()}); err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	ls := link.Client(conn, link.Config{})
	if !s.links.add(ls) {
		_ = ls.Close()
		return
	}
	defer s.links.remove(ls)
	defer ls.Close()
	b.link = ls
	defer s.attach(b, logger)()
	if t := s.opts.KeepaliveTime; t > 0 {
		go s.pingLink(ls, t, logger)
	}
	<-ls.Done()
	if err := ls.Err(); err != nil && !errors.Is(err, link.ErrSessionClosed) && !errors.Is(err, io.EOF) {
		logger.V(2).Info("Agent link ended", "err", err)
	}
}

// pingLink ends a session whose agent stopped answering, as gRPC's
// keepalive ends a dead agent connection.
func (s *Server) pingLink(ls *link.Session, every time.Duration, logger logr.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ls.Done():
			return
		case <-t.C:
		}
		// gRPC's keepalive timeout: a dead agent is not chosen for long.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := ls.Ping(ctx)
		cancel()
		if err != nil {
			logger.V(1).Info("Agent link did not answer a ping; closing it", "err", err)
			_ = ls.Close()
			return
		}
	}
}

// linkDial dials through a portside-link/2 agent; c is pending on b.
func (s *Server) linkDial(b *backend, c *conn, ctx context.Context, protocol, address string) {
	s.m.packet(segToAgent, client.PacketType_DIAL_REQ)
	st, err := b.link.Dial(ctx, protocol, address)
	c.cancelDial() // the dial's context ends with it, whatever the outcome
	if !b.takePendingIf(c) {
		// A timeout, the frontend or the agent's going resolved it.
		if st != nil {
			_ = st.Close()
		}
		return
	}
	if err != nil {
		s.m.packet(segFromAgent, client.PacketType_DIAL_RSP)
		var de *link.DialError
		if errors.As(err, &de) {
			s.m.dialFailed(failErrorResponse)
			s.resolveFailed(c, de.Reason)
			return
		}
		s.m.dialFailed(failBackendClose)
		s.resolveFailed(c, "agent connection lost before the dial completed: "+err.Error())
		return
	}
	s.m.packet(segFromAgent, client.PacketType_DIAL_RSP)
	c.establish(int64(st.ID()), linkStream{st})
	if !s.resolveOK(c) {
		return
	}
	s.pumpFromLink(c, st)
}

// pumpFromLink moves one connection's bytes from its link stream to the
// frontend; a blocked frontend stalls only this stream (its window).
func (s *Server) pumpFromLink(c *conn, st *link.Stream) {
	if f, ok := c.fe.(*httpFrontend); ok {
		if tc := tryConnOf(f.conn); tc != nil {
			w := &httpLinkWriter{s: s, f: f, tc: tc}
			_, err := st.WriteTo(w)
			if w.werr != nil {
				if c.finish() {
					s.connFinished()
					c.closeDone()
				}
				return
			}
			s.linkEnded(c, err)
			return
		}
	}
	for {
		out := netproxy.NewOutData(c.connectID)
		n, err := st.Read(out.Buf())
		if n > 0 {
			out.SetLen(n)
			s.m.packet(segFromAgent, client.PacketType_DATA)
			s.m.packet(segToClient, client.PacketType_DATA)
			ferr := c.fe.dataOut(out)
			out.Free()
			if ferr != nil {
				if c.finish() {
					s.connFinished()
					c.closeDone()
				}
				return
			}
		} else {
			out.Free()
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			s.linkEnded(c, err)
			return
		}
	}
}

// linkEnded finishes a connection whose link stream ended: the agent's
// close (err nil) or the link's failure.
func (s *Server) linkEnded(c *conn, err error) {
	msg := ""
	if err != nil {
		msg = "agent connection lost"
	}
	if c.finish() {
		s.connFinished()
		c.fe.closed(c, msg)
		c.closeDone()
	}
}

// linkStream is a connection's own stream on portside-link/2.
type linkStream struct{ st *link.Stream }

func (l linkStream) send(pkt any) error {
	switch p := pkt.(type) {
	case *netproxy.OutData:
		_, err := l.st.Write(p.Buf())
		return err
	case *netproxy.Received:
		return l.sendPacket(p.Packet)
	case *client.Packet:
		return l.sendPacket(p)
	}
	return errors.New("portside-link: unexpected packet")
}

func (l linkStream) sendPacket(p *client.Packet) error {
	switch p.Type {
	case client.PacketType_DATA:
		_, err := l.st.Write(p.GetData().GetData())
		return err
	case client.PacketType_CLOSE_REQ:
		return l.st.Close()
	}
	return nil
}

func (l linkStream) abort() { _ = l.st.Close() }
