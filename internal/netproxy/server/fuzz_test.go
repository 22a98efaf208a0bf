package server

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
)

// fakeStream is a server stream fed from a channel that records sends.
type fakeStream struct {
	grpc.ServerStream
	ctx    context.Context
	in     chan *client.Packet
	mu     sync.Mutex
	sent   []*client.Packet
	closed chan struct{}
}

func newFakeStream(md metadata.MD) *fakeStream {
	return &fakeStream{ctx: metadata.NewIncomingContext(context.Background(), md),
		in: make(chan *client.Packet, 64), closed: make(chan struct{})}
}

func (f *fakeStream) Context() context.Context     { return f.ctx }
func (f *fakeStream) SendHeader(metadata.MD) error { return nil }
func (f *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       {}
func (f *fakeStream) Send(p *client.Packet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, p)
	return nil
}
func (f *fakeStream) SendMsg(m any) error {
	if r, ok := m.(*netproxy.Received); ok {
		return f.Send(r.Packet)
	}
	return f.Send(m.(*client.Packet))
}
func (f *fakeStream) RecvMsg(m any) error {
	p, err := f.Recv()
	if err != nil {
		return err
	}
	if r, ok := m.(*netproxy.Received); ok {
		r.Packet = p
		return nil
	}
	proto.Merge(m.(*client.Packet), p)
	return nil
}
func (f *fakeStream) Recv() (*client.Packet, error) {
	select {
	case p := <-f.in:
		return p, nil
	case <-f.closed:
		return nil, io.EOF
	}
}

// lastSent returns the last packet of type t sent on the stream.
func (f *fakeStream) lastSent(t client.PacketType) *client.Packet {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.sent) - 1; i >= 0; i-- {
		if f.sent[i].Type == t {
			return f.sent[i]
		}
	}
	return nil
}

func newTestServer(opts Options) *Server {
	if len(opts.Strategies) == 0 {
		opts.Strategies = []Strategy{StrategyDefault}
	}
	opts.ServerID, opts.ServerCount = "fuzz", 1
	reg := prometheus.NewRegistry()
	return &Server{opts: opts, reg: reg, m: newMetrics(reg), logger: klog.Background(),
		closeWait: 20 * time.Millisecond, httpConn: map[net.Conn]struct{}{}, backends: registry{bySession: map[string]*backend{}}}
}

// FuzzPackets drives the server with arbitrary packets from a frontend and
// from a multiplexing agent, interleaved. Packets refer to the dial IDs and
// connection IDs actually in play, so the fuzzer reaches the state machine
// rather than only its "unknown ID" guards. Nothing may panic, and once
// both streams end nothing may remain registered.
func FuzzPackets(f *testing.F) {
	f.Add([]byte{0, 1, 10, 11, 2, 13, 3})
	f.Add([]byte{0, 10, 1, 1, 11, 12, 2})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 14, 4})
	f.Add([]byte{0, 15, 16, 17, 18, 19, 1, 2})
	f.Add([]byte{0, 0, 10, 10, 1, 20, 21})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		s := newTestServer(Options{BackendDialTimeout: time.Duration(len(ops)%3) * time.Millisecond})
		agentStream := newFakeStream(metadata.Pairs("agentID", "fuzz", "agentIdentifiers", "host=a&cidr=bogus"))
		feStream := newFakeStream(nil)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = agentService{s: s}.Connect(agentStream) }()
		for deadline := time.Now().Add(time.Second); s.backends.len() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		go func() { defer wg.Done(); _ = proxyService{s: s}.Proxy(feStream) }()

		// IDs in play: the dial the server forwarded and the connect ID
		// the fake agent hands out.
		random := func() int64 {
			if p := agentStream.lastSent(client.PacketType_DIAL_REQ); p != nil {
				return p.GetDialRequest().Random
			}
			return 42
		}
		const connID = 7
		for i, op := range ops {
			var p *client.Packet
			toAgent := op >= 10
			switch op % 30 {
			case 0:
				p = netproxy.DialReq(int64(i+1), "tcp", "a:80")
			case 1:
				p = netproxy.Data(connID, []byte("hello"))
			case 2:
				p = netproxy.CloseReq(connID)
			case 3:
				p = netproxy.DialCls(random())
			case 4:
				p = netproxy.DialReq(int64(i+1), "udp", "")
			case 5:
				p = netproxy.Data(0, nil)
			case 6, 7, 8, 9:
				p = garbage(ops[i:])
			case 10:
				p = netproxy.DialRsp(random(), connID, "")
			case 11:
				p = netproxy.Data(connID, []byte("world"))
			case 12:
				p = netproxy.CloseRsp(connID, "")
			case 13:
				p = netproxy.DialRsp(random(), 0, "connection refused")
			case 14:
				p = netproxy.DialCls(random())
			case 15:
				p = netproxy.Drain()
			case 16:
				p = netproxy.Data(connID+1, []byte("stray"))
			case 17:
				p = netproxy.CloseRsp(connID+1, "")
			case 18:
				p = netproxy.DialRsp(random()+1, connID+1, "")
			default:
				p = garbage(ops[i:])
			}
			if toAgent {
				agentStream.in <- p
			} else {
				feStream.in <- p
			}
			if op%4 == 0 {
				time.Sleep(time.Microsecond)
			}
		}
		close(feStream.closed)
		time.Sleep(time.Millisecond)
		close(agentStream.closed)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("handlers did not return after both streams ended")
		}
		if n := s.backends.len(); n != 0 {
			t.Fatalf("%d backends still registered", n)
		}
	})
}

// garbage decodes arbitrary bytes as a packet, or builds a packet whose
// type and payload disagree.
func garbage(b []byte) *client.Packet {
	p := &client.Packet{}
	if proto.Unmarshal(b, p) == nil && len(b) > 1 {
		return p
	}
	t := client.PacketType(0)
	if len(b) > 0 {
		t = client.PacketType(int(b[0]) % 9)
	}
	return &client.Packet{Type: t} // no payload
}
