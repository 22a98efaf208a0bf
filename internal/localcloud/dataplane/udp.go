package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// udpListener forwards datagrams on VIP:port to a backend per client flow
// (client address), and replies back from the VIP.
type udpListener struct {
	b           *balancer
	conn        *net.UDPConn
	backendPort atomic.Int64
	done        chan struct{}
	closeOnce   sync.Once

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

type udpFlow struct {
	be       *backend
	upstream *net.UDPConn
	lastSeen atomic.Int64 // unix nanos
}

func listenUDP(b *balancer, addr netip.AddrPort, backendPort int) (*udpListener, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	l := &udpListener{b: b, conn: conn, done: make(chan struct{}), flows: map[netip.AddrPort]*udpFlow{}}
	l.backendPort.Store(int64(backendPort))
	go l.serve()
	go l.reapIdle()
	return l, nil
}

func (l *udpListener) setBackendPort(p int) { l.backendPort.Store(int64(p)) }

func (l *udpListener) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		_ = l.conn.Close()
		l.mu.Lock()
		for k, f := range l.flows {
			_ = f.upstream.Close()
			delete(l.flows, k)
		}
		l.mu.Unlock()
	})
}

func (l *udpListener) serve() {
	buf := make([]byte, 64*1024)
	for {
		n, client, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-l.done:
				return
			default:
				continue
			}
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.flows[client]; ok && !f.be.draining.Load() {
		return f
	} else if ok {
		_ = f.upstream.Close()
		delete(l.flows, client)
	}
	be := l.b.pick(client.Addr(), nil)
	if be == nil {
		return nil
	}
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(be.addr, uint16(l.backendPort.Load())))
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return nil
	}
	f := &udpFlow{be: be, upstream: up}
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
				_ = f.upstream.Close()
				delete(l.flows, k)
			}
		}
		l.mu.Unlock()
	}
}
