package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/link"
)

// agentHandshakeTimeout bounds a TLS handshake on the agent port: a peer
// that opens a connection and says nothing holds a goroutine, not the
// accept loop, and only this long.
const agentHandshakeTimeout = 30 * time.Second

// agentPort runs the TLS handshakes of the agent port itself, so that ALPN
// can choose the protocol: portside-link/2 for Portside agents that offer
// it, gRPC (h2) for everyone else (upstream agents, Portside agents with
// --portside-link=false). gRPC is handed the connections already
// handshaken, through a listener of its own.
type agentPort struct {
	s     *Server
	raw   net.Listener
	grpcs chan handshaken

	closeOnce sync.Once
	closed    chan struct{}
}

type handshaken struct {
	conn  net.Conn
	state tls.ConnectionState
}

func newAgentPort(s *Server, raw net.Listener) *agentPort {
	return &agentPort{s: s, raw: raw, grpcs: make(chan handshaken), closed: make(chan struct{})}
}

// protocols are what the agent port offers, in the server's order of
// preference (crypto/tls picks the first of the server's the client has).
func (s *Server) protocols() []string {
	if s.opts.DisableLink {
		return []string{"h2"}
	}
	return []string{link.ALPN, "h2"}
}

// serve accepts connections until the port is closed. Transient accept
// errors (EMFILE) are retried with backoff, as net/http does, instead of
// taking the agent port down.
func (p *agentPort) serve() error {
	cfg := p.s.opts.AgentTLS.Clone()
	cfg.NextProtos = p.s.protocols()
	var delay time.Duration
	for {
		raw, err := p.raw.Accept()
		if err != nil {
			select {
			case <-p.closed:
				return net.ErrClosed
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.s.logger.V(1).Info("Agent port accept failed; retrying", "err", err, "delay", delay)
			select {
			case <-time.After(delay):
			case <-p.closed:
				return net.ErrClosed
			}
			continue
		}
		delay = 0
		go p.handshake(raw, cfg)
	}
}

func (p *agentPort) handshake(raw net.Conn, cfg *tls.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), agentHandshakeTimeout)
	conn, state, err := netproxy.HandshakeTLS(ctx, raw, cfg, false)
	cancel()
	if err != nil {
		// grpc-go would only log this to grpclog (discarded): an agent
		// refused for its certificate would leave no trace on the server.
		p.s.m.agentHandshakes.Inc()
		p.s.logger.V(1).Info("Agent TLS handshake failed", "remoteAddr", raw.RemoteAddr().String(), "err", err)
		_ = raw.Close()
		return
	}
	if state.NegotiatedProtocol == link.ALPN {
		p.s.serveLink(conn, state)
		return
	}
	select {
	case p.grpcs <- handshaken{conn, state}:
	case <-p.closed:
		_ = conn.Close()
	}
}

// Accept, Close and Addr make the port the listener gRPC serves.
func (p *agentPort) Accept() (net.Conn, error) {
	select {
	case h := <-p.grpcs:
		return &handshakenConn{Conn: h.conn, state: h.state}, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

func (p *agentPort) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
		err = p.raw.Close()
	})
	return err
}

func (p *agentPort) Addr() net.Addr { return p.raw.Addr() }

// handshakenConn is a connection whose TLS handshake the agent port ran.
type handshakenConn struct {
	net.Conn
	state tls.ConnectionState
}

// handshakenCreds are gRPC's transport credentials for the agent port:
// the handshake is done, so they only report it, as credentials.NewTLS
// would have (TLSInfo, which authentication and identity read).
type handshakenCreds struct{}

func (handshakenCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hc, ok := c.(*handshakenConn)
	if !ok {
		return nil, nil, errors.New("agent port: connection without a TLS handshake")
	}
	return hc.Conn, tlsInfo(hc.state), nil
}

func tlsInfo(state tls.ConnectionState) credentials.TLSInfo {
	return credentials.TLSInfo{State: state, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}

func (handshakenCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("agent port credentials are server-side only")
}

func (handshakenCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (c handshakenCreds) Clone() credentials.TransportCredentials { return c }
func (handshakenCreds) OverrideServerName(string) error           { return nil }
