package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// udpListener forwards datagrams on VIP:port to a backend per client flow
// (client address), and replies back from the VIP.
type udpListener struct {
	b           *balancer
	conn        *net.UDPConn
	backendPort atomic.Int64
	state       serveState
	done        chan struct{}
	closeOnce   sync.Once
	// vip4: the listener's VIP is IPv4 (pick prefers backends of its family).
	vip4 bool

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

type udpFlow struct {
	be       *backend
	port     int // a backend port change moves the flow on
	upstream *net.UDPConn
	lastSeen atomic.Int64 // unix nanos
}

func listenUDP(b *balancer, addr netip.AddrPort, backendPort int) (*udpListener, error) {
	var conn *net.UDPConn
	if b.opts.ListenPacket != nil {
		pc, err := b.opts.ListenPacket("udp", addr.String())
		if err != nil {
			return nil, err
		}
		conn = pc.(*net.UDPConn)
	} else {
		var err error
		if conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr)); err != nil {
			return nil, err
		}
	}
	l := &udpListener{b: b, conn: conn, done: make(chan struct{}), flows: map[netip.AddrPort]*udpFlow{}, vip4: addr.Addr().Unmap().Is4()}
	l.state.proto, l.state.addr = api.ProtocolUDP, addr.String()
	l.backendPort.Store(int64(backendPort))
	go l.serve()
	go l.reapIdle()
	return l, nil
}

// setBackendPort: flows to the old port move to the new one on their next
// datagram, as flows to a draining backend move to another backend.
func (l *udpListener) setBackendPort(p int) { l.backendPort.Store(int64(p)) }

func (l *udpListener) status() api.ListenerHealth {
	l.mu.Lock()
	n := len(l.flows)
	l.mu.Unlock()
	return l.state.status(int64(n))
}

func (l *udpListener) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		_ = l.conn.Close()
		l.closeConns()
	})
}

func (l *udpListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, f := range l.flows {
		l.endFlow(k, f)
	}
}

// endFlow is called with l.mu held.
func (l *udpListener) endFlow(client netip.AddrPort, f *udpFlow) {
	_ = f.upstream.Close()
	delete(l.flows, client)
	releaseBoth(&l.b.flows, l.b.globalFlows)
}

func (l *udpListener) serve() {
	buf := make([]byte, 64*1024)
	var wait time.Duration
	for {
		n, client, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if acceptLoopEnds(err) {
				return
			}
			wait = acceptBackoff(wait)
			l.state.failed(l.b.logger(), err, wait)
			if !sleepOrDone(wait, l.done) {
				return
			}
			continue
		}
		if wait != 0 {
			wait = 0
			l.state.ok(l.b.logger())
		}
		if !l.b.allowed(client.Addr()) {
			continue
		}
		f := l.flow(client)
		if f == nil {
			continue // no healthy backend: drop, as a cloud LB does
		}
		f.lastSeen.Store(time.Now().UnixNano())
		_, _ = f.upstream.Write(buf[:n])
	}
}

// flow returns the client's flow, opening one to a picked backend if needed.
func (l *udpListener) flow(client netip.AddrPort) *udpFlow {
	port := int(l.backendPort.Load())
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.flows[client]; ok && !f.be.draining.Load() && f.port == port {
		return f
	} else if ok {
		l.endFlow(client, f)
	}
	select {
	case <-l.done: // closing: a flow opened now would outlive close
		return nil
	default:
	}
	if !acquireBoth(&l.b.flows, l.b.globalFlows) {
		l.state.rejected.Add(1)
		return nil
	}
	be := l.b.pick(l.vip4, client.Addr(), nil)
	if be == nil {
		releaseBoth(&l.b.flows, l.b.globalFlows)
		return nil
	}
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(be.addr, uint16(port)))
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		releaseBoth(&l.b.flows, l.b.globalFlows)
		return nil
	}
	f := &udpFlow{be: be, port: port, upstream: up}
	f.lastSeen.Store(time.Now().UnixNano())
	l.flows[client] = f
	go l.replies(client, f)
	return f
}

// replies copies datagrams from the backend back to the client.
func (l *udpListener) replies(client netip.AddrPort, f *udpFlow) {
	buf := make([]byte, 64*1024)
	for {
		n, err := f.upstream.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // e.g. ECONNREFUSED from an ICMP port unreachable: per datagram
		}
		f.lastSeen.Store(time.Now().UnixNano())
		_, _ = l.conn.WriteToUDPAddrPort(buf[:n], client)
	}
}

func (l *udpListener) reapIdle() {
	tick := time.NewTicker(l.b.opts.UDPIdleTimeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
		}
		cutoff := time.Now().Add(-l.b.opts.UDPIdleTimeout).UnixNano()
		l.mu.Lock()
		for k, f := range l.flows {
			if f.lastSeen.Load() < cutoff {
				l.endFlow(k, f)
			}
		}
		l.mu.Unlock()
	}
}
