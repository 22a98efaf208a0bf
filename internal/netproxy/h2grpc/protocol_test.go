package h2grpc

// Protocol edges, driven by hand where a grpc-go client would not go:
// each was a defect found in review, and is kept as its regression test.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// serveSock is serve without a grpc-go client: the server and its socket.
func serveSock(t *testing.T, cfg Config, handler Handler) (*Server, string) {
	t.Helper()
	if cfg.Methods == nil {
		cfg.Methods = map[string]Handler{proxyMethod: handler}
	}
	cfg.Codec = encoding.GetCodecV2("proto")
	cfg.Pool = mem.DefaultBufferPool()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(cfg)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	return s, sock
}

// rawClient is a hand-driven HTTP/2 client.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
}

func dialRaw(t *testing.T, sock string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	rc := &rawClient{t: t, nc: nc}
	rc.fr = http2.NewFramer(nc, nc)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return rc
}

// headerBlock encodes a gRPC request's headers.
func (rc *rawClient) headerBlock(kv ...string) []byte {
	rc.hbuf.Reset()
	base := []string{":method", "POST", ":scheme", "http", ":path", proxyMethod, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}
	kv = append(base, kv...)
	for i := 0; i+1 < len(kv); i += 2 {
		_ = rc.henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return rc.hbuf.Bytes()
}

func (rc *rawClient) headers(id uint32, end bool, kv ...string) {
	rc.t.Helper()
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.headerBlock(kv...),
		EndHeaders: true, EndStream: end}); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawClient) message(id uint32, payload []byte, end bool) {
	rc.t.Helper()
	b := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	copy(b[5:], payload)
	if err := rc.fr.WriteData(id, end, b); err != nil {
		rc.t.Fatal(err)
	}
}

// readUntil reads frames (acking settings and pings) until f returns true
// or the deadline passes; it returns the error that ended reading, if any.
func (rc *rawClient) readUntil(d time.Duration, f func(http2.Frame) bool) error {
	_ = rc.nc.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = rc.nc.SetReadDeadline(time.Time{}) }()
	for {
		fr, err := rc.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch fr := fr.(type) {
		case *http2.SettingsFrame:
			if !fr.IsAck() {
				_ = rc.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !fr.IsAck() {
				_ = rc.fr.WritePing(true, fr.Data)
			}
		}
		if f(fr) {
			return nil
		}
	}
}

// A client's SETTINGS_MAX_FRAME_SIZE out of 2^14..2^24-1 is a
// PROTOCOL_ERROR (RFC 9113 6.5.2); used, 0 would make writeData divide by
// zero and crash the process.
func TestBadMaxFrameSizeIsProtocolError(t *testing.T) {
	panicked := make(chan any, 1)
	_, sock := serveSock(t, Config{}, func(st *Stream) (err error) {
		defer func() {
			if r := recover(); r != nil {
				panicked <- r
				err = errors.New("panicked")
			}
		}()
		return st.SendMsg(data(10))
	})
	rc := dialRaw(t, sock, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 0})
	// A stream after the settings (the server may have closed by then).
	_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.headerBlock(), EndHeaders: true})
	var goaway *http2.GoAwayFrame
	_ = rc.readUntil(2*time.Second, func(f http2.Frame) bool {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goaway = g
			return true
		}
		return false
	})
	select {
	case r := <-panicked:
		t.Fatalf("SendMsg panicked after SETTINGS_MAX_FRAME_SIZE=0 (uncaught, this kills the proxy): %v", r)
	default:
	}
	if goaway == nil || goaway.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("SETTINGS_MAX_FRAME_SIZE=0 was not answered with GOAWAY PROTOCOL_ERROR (got %v)", goaway)
	}
}

// Messages over half the stream window return their window as they
// arrive only as the next to be read: a handler that does not read stops
// a client sending them after a window and one message.
func TestBigMessagesHoldTheStreamWindow(t *testing.T) {
	const window = 64 << 10
	_, cc := serve(t, Config{StreamWindow: window, MaxRecvMsgSize: 1 << 20}, func(st *Stream) error {
		<-st.Context().Done() // never reads
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	p := data(40 << 10) // > window/2: a "big" message
	go func() {
		for sent.Load() < 32<<20 && stream.Send(p) == nil {
			sent.Add(40 << 10)
		}
	}()
	time.Sleep(time.Second)
	// The window, plus what grpc-go's client buffers beyond it.
	if got := sent.Load(); got > window+128<<10 {
		t.Fatalf("the client sent %d KiB to a handler that reads nothing; the stream window is %d KiB (the server holds it all)", got>>10, window>>10)
	}
}

// Window reserved for a write that a stream's end then stops goes back:
// the connection's is shared, and with grpc-go's 64 KiB initial
// connection window, every other stream on it would wait for ever.
func TestEndedStreamReturnsReservedWindow(t *testing.T) {
	ready := make(chan *Stream, 1)
	goSend := make(chan struct{})
	sendRes := make(chan error, 1)
	_, cc := serve(t, Config{}, func(st *Stream) error {
		md, _ := metadata.FromIncomingContext(st.Context())
		if len(md.Get("x-first")) == 0 {
			return echo(st)
		}
		var p client.Packet
		if err := st.RecvMsg(&p); err != nil {
			return err
		}
		ready <- st
		<-goSend
		sendRes <- st.SendMsg(data(100 << 10))
		return nil
	})
	ctx1, cancel1 := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-first", "1"))
	s1, err := client.NewProxyServiceClient(cc).Proxy(ctx1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(data(1)); err != nil {
		t.Fatal(err)
	}
	st := <-ready
	c := st.c
	c.mu.Lock()
	before := c.connSendWin
	c.mu.Unlock()

	// Hold wmu; the client resets stream 1, so the reader queues on wmu
	// in abort; then the handler reserves window and queues behind it.
	c.wmu.Lock()
	cancel1()
	time.Sleep(200 * time.Millisecond)
	close(goSend)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		w := c.connSendWin
		c.mu.Unlock()
		if w < before {
			break
		}
		if time.Now().After(deadline) {
			c.wmu.Unlock()
			t.Skip("the handler did not reserve window")
		}
	}
	time.Sleep(50 * time.Millisecond)
	c.wmu.Unlock()
	if err := <-sendRes; err == nil {
		t.Skip("the handler's write went first: the race was not arranged")
	}
	c.mu.Lock()
	after := c.connSendWin
	c.mu.Unlock()
	if after != before {
		t.Errorf("connection send window %d before, %d after a stream ended with its reservation unsent", before, after)
	}
	// What it costs: another stream on the connection cannot send.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	s2, err := client.NewProxyServiceClient(cc).Proxy(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Send(data(1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); err != nil {
		t.Fatalf("echo on another stream of the connection: %v", err)
	}
}

// SendMsg from several goroutines: a message larger than the window is
// written in several rounds, and another sender's frames must not land
// between them.
func TestConcurrentSendMsgKeepsMessagesWhole(t *testing.T) {
	const n, size = 10, 100 << 10
	_, cc := serve(t, Config{}, func(st *Stream) error {
		var wg sync.WaitGroup
		for id := 1; id <= 2; id++ {
			wg.Go(func() {
				b := bytes.Repeat([]byte{byte(id)}, size)
				p := &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: int64(id), Data: b}}}
				for range n {
					if st.SendMsg(p) != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(data(1))
	for i := range 2 * n {
		got, err := stream.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		d := got.GetData()
		if id := d.GetConnectID(); (id != 1 && id != 2) || !bytes.Equal(d.GetData(), bytes.Repeat([]byte{byte(id)}, size)) {
			t.Fatalf("message %d is corrupt (id %d, %d bytes)", i, id, len(d.GetData()))
		}
	}
}

// A message over MaxRecvMsgSize ends the stream with RESOURCE_EXHAUSTED
// in its trailers, as grpc-go's server does (not a bare RST_STREAM).
func TestOversizeMessageStatus(t *testing.T) {
	_, cc := serve(t, Config{MaxRecvMsgSize: 1 << 10}, echo)
	stream, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(data(4 << 10))
	if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("client: %v, want ResourceExhausted as grpc-go's server gives", err)
	}
}

// grpc-timeout "0n" (what grpc-go's client sends when its deadline is
// already due) is due, not "no deadline": answered DEADLINE_EXCEEDED.
func TestZeroTimeoutIsDue(t *testing.T) {
	ran := make(chan bool, 1)
	_, sock := serveSock(t, Config{}, func(st *Stream) error {
		_, ok := st.Context().Deadline()
		ran <- ok
		return nil
	})
	rc := dialRaw(t, sock)
	rc.headers(1, true, "grpc-timeout", "0n")
	var grpcStatus string
	_ = rc.readUntil(2*time.Second, func(f http2.Frame) bool {
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			grpcStatus = h.PseudoValue("status")
			for _, f := range h.RegularFields() {
				if f.Name == "grpc-status" {
					grpcStatus += "/grpc-status " + f.Value
				}
			}
			return h.StreamEnded()
		}
		_, rst := f.(*http2.RSTStreamFrame)
		return rst
	})
	select {
	case ok := <-ran:
		if !ok {
			t.Fatalf("grpc-timeout 0n: the handler ran without a deadline (answer %s)", grpcStatus)
		}
	default:
	}
}

// A HEADERS frame the framer rejects as a stream error (here an invalid
// header value) opens and resets its stream: DATA the client had in
// flight for it is ignored, not "DATA on a stream never opened" and a
// GOAWAY of the whole connection.
func TestDataAfterMalformedHeadersIsIgnored(t *testing.T) {
	_, sock := serveSock(t, Config{}, echo)
	rc := dialRaw(t, sock)
	rc.headers(1, false, "x-bad", "a\x00b")
	rc.message(1, nil, false)
	var goaway *http2.GoAwayFrame
	_ = rc.readUntil(time.Second, func(f http2.Frame) bool {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goaway = g
			return true
		}
		return false
	})
	if goaway != nil {
		t.Fatalf("DATA for a stream the server had just reset ended the connection: GOAWAY %v %q", goaway.ErrCode, goaway.DebugData())
	}
}

// GracefulStop while the reader opens streams: maxID is shared between
// them (run with -race; the window is small, so this loops).
func TestGracefulStopDuringHeaders(t *testing.T) {
	for range 30 {
		s, sock := serveSock(t, Config{}, func(st *Stream) error { return nil })
		rc := dialRaw(t, sock)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for id := uint32(1); ; id += 2 {
				select {
				case <-stop:
					return
				default:
				}
				rc.hbuf.Reset()
				_ = rc.henc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
				_ = rc.henc.WriteField(hpack.HeaderField{Name: ":path", Value: proxyMethod})
				_ = rc.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
				if rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndHeaders: true, EndStream: true}) != nil {
					return
				}
			}
		}()
		go func() { _, _ = io.Copy(io.Discard, rc.nc) }()
		time.Sleep(20 * time.Millisecond)
		gs := make(chan struct{})
		go func() { s.GracefulStop(); close(gs) }()
		time.Sleep(20 * time.Millisecond)
		close(stop)
		<-done
		_ = rc.nc.Close()
		<-gs
	}
}
