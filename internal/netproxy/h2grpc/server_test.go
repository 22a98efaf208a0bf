package h2grpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the "proto" codec
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

const proxyMethod = "/ProxyService/Proxy"

// serve starts a Server for handler on a unix socket of the test's own
// and returns a grpc-go client connection to it (the konnectivity
// client's library, as kube-apiserver dials).
func serve(t *testing.T, cfg Config, handler Handler) (*Server, *grpc.ClientConn) {
	t.Helper()
	if cfg.Methods == nil {
		cfg.Methods = map[string]Handler{proxyMethod: handler}
	}
	cfg.Codec = encoding.GetCodecV2("proto")
	cfg.Pool = mem.DefaultBufferPool()
	if cfg.StreamWindow == 0 {
		cfg.StreamWindow = 1 << 20
	}
	if cfg.ConnWindow == 0 {
		cfg.ConnWindow = 64 << 20
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 1000
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(cfg)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, cc
}

func echo(st *Stream) error {
	for {
		var p client.Packet
		if err := st.RecvMsg(&p); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := st.SendMsg(&p); err != nil {
			return err
		}
	}
}

func data(n int) *client.Packet {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: int64(n), Data: b}}}
}

// TestEcho sends messages of every size that matters (empty, under and
// over a frame, over the 64 KiB windows a grpc-go client starts with,
// over the stream window) both ways at once, and checks each whole and in
// order.
func TestEcho(t *testing.T) {
	_, cc := serve(t, Config{MaxRecvMsgSize: 8 << 20}, echo)
	stream, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{0, 1, 100, 16379, 16380, 16384, 65535, 70000, 256 << 10, 1 << 20, 3 << 20, 5}
	sent := make([]*client.Packet, 0, 3*len(sizes))
	for range 3 {
		for _, n := range sizes {
			sent = append(sent, data(n))
		}
	}
	errc := make(chan error, 1)
	go func() {
		for _, p := range sent {
			if err := stream.Send(p); err != nil {
				errc <- err
				return
			}
		}
		errc <- stream.CloseSend()
	}()
	for i, want := range sent {
		got, err := stream.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got.GetData().GetConnectID() != want.GetData().GetConnectID() || !bytes.Equal(got.GetData().GetData(), want.GetData().GetData()) {
			t.Fatalf("message %d: got %d bytes (id %d), want %d", i, len(got.GetData().GetData()), got.GetData().GetConnectID(), len(want.GetData().GetData()))
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF (status OK)", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestManyStreams runs streams concurrently on one connection.
func TestManyStreams(t *testing.T) {
	_, cc := serve(t, Config{}, echo)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			stream, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
			if err != nil {
				errs <- err
				return
			}
			for j := range 20 {
				p := data(1 + (i*j)%20000)
				if err := stream.Send(p); err != nil {
					errs <- err
					return
				}
				got, err := stream.Recv()
				if err != nil || !bytes.Equal(got.GetData().GetData(), p.GetData().GetData()) {
					errs <- fmt.Errorf("stream %d message %d: %v", i, j, err)
					return
				}
			}
			_ = stream.CloseSend()
			if _, err := stream.Recv(); err != io.EOF {
				errs <- fmt.Errorf("stream %d end: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestStatus: a handler's error is the client's status, message intact;
// an unknown method is UNIMPLEMENTED without a handler running.
func TestStatus(t *testing.T) {
	msg := "dial refused: 100% of agents gone\nnaïve retry"
	_, cc := serve(t, Config{}, func(st *Stream) error {
		return status.Error(codes.Unavailable, msg)
	})
	stream, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if s, _ := status.FromError(err); s.Code() != codes.Unavailable || s.Message() != msg {
		t.Fatalf("got %v, want Unavailable %q", err, msg)
	}

	desc := &grpc.StreamDesc{StreamName: "Other", ServerStreams: true, ClientStreams: true}
	other, err := cc.NewStream(context.Background(), desc, "/ProxyService/Other")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RecvMsg(&client.Packet{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}
	// A plain error is UNKNOWN, as grpc-go's server gives it.
	_, cc2 := serve(t, Config{}, func(*Stream) error { return errors.New("plain") })
	s2, err := client.NewProxyServiceClient(cc2).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "plain") {
		t.Fatalf("plain error: %v, want Unknown with its text", err)
	}
}

// TestContext: the handler's context has the client's metadata and
// deadline, and ends when the client cancels.
func TestContext(t *testing.T) {
	got := make(chan string, 1)
	deadline := make(chan time.Time, 1)
	ended := make(chan error, 1)
	_, cc := serve(t, Config{}, func(st *Stream) error {
		md, _ := metadata.FromIncomingContext(st.Context())
		got <- strings.Join(md.Get("x-caller"), ",") + "|" + strings.Join(md.Get("user-agent"), ",")
		d, _ := st.Context().Deadline()
		deadline <- d
		<-st.Context().Done()
		ended <- st.RecvMsg(&client.Packet{})
		return nil
	})
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-caller", "kube-apiserver"), time.Minute)
	stream, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(data(1)) // the headers go with the first message
	if g := <-got; !strings.HasPrefix(g, "kube-apiserver|grpc-go/") {
		t.Fatalf("metadata: %q", g)
	}
	if d := <-deadline; time.Until(d) < 50*time.Second || time.Until(d) > time.Minute {
		t.Fatalf("deadline in %v, want about a minute", time.Until(d))
	}
	cancel()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("RecvMsg after the client cancelled: %v, want Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end when the client cancelled")
	}
}

// TestDeadlineExceeded: a handler past the client's deadline has its
// stream ended, and the client sees DEADLINE_EXCEEDED.
func TestDeadlineExceeded(t *testing.T) {
	sendErr := make(chan error, 1)
	_, cc := serve(t, Config{}, func(st *Stream) error {
		<-st.Context().Done()
		sendErr <- st.SendMsg(data(1))
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stream, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(data(1))
	if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("client: %v, want DeadlineExceeded", err)
	}
	if err := <-sendErr; err == nil {
		t.Fatal("SendMsg after the deadline succeeded")
	}
}

// TestSlowHandlerHoldsItsWindow: a handler that stops reading holds at
// most its stream window; the client's sends then wait, and another
// stream on the same connection still flows.
func TestSlowHandlerHoldsItsWindow(t *testing.T) {
	release := make(chan struct{})
	var stalled atomic.Bool
	const window = 256 << 10
	_, cc := serve(t, Config{StreamWindow: window}, func(st *Stream) error {
		md, _ := metadata.FromIncomingContext(st.Context())
		if len(md.Get("x-stall")) > 0 {
			stalled.Store(true)
			<-release
		}
		return echo(st)
	})
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-stall", "1"))
	defer cancel()
	slow, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	go func() {
		p := data(32 << 10)
		for slow.Send(p) == nil {
			sent.Add(32 << 10)
		}
	}()
	// grpc-go's client buffers up to 64 KiB of a stream beyond what the
	// server's window lets it write.
	time.Sleep(time.Second)
	if got := sent.Load(); got > window+64<<10+64<<10 {
		t.Fatalf("the client sent %d bytes to a handler that reads nothing; the window is %d", got, window)
	}
	if !stalled.Load() {
		t.Fatal("the stalling handler did not run")
	}
	// Another stream is not held up.
	fast, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		p := data(16 << 10)
		if err := fast.Send(p); err != nil {
			t.Fatal(err)
		}
		if got, err := fast.Recv(); err != nil || !bytes.Equal(got.GetData().GetData(), p.GetData().GetData()) {
			t.Fatalf("message %d beside a stalled stream: %v", i, err)
		}
	}
	close(release)
}

// TestGracefulStop: streams running finish, the connection is told
// GOAWAY, no new stream is served, and Serve returns.
func TestGracefulStop(t *testing.T) {
	running := make(chan struct{}, 1)
	s, cc := serve(t, Config{}, func(st *Stream) error {
		select {
		case running <- struct{}{}:
		default:
		}
		return echo(st)
	})
	stream, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(data(10))
	<-running
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while a stream was open")
	default:
	}
	// The open stream still works.
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	p := data(100)
	if err := stream.Send(p); err != nil {
		t.Fatal(err)
	}
	if got, err := stream.Recv(); err != nil || !bytes.Equal(got.GetData().GetData(), p.GetData().GetData()) {
		t.Fatalf("during the drain: %v", err)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop did not return after the last stream ended")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, err := client.NewProxyServiceClient(cc).Proxy(ctx); err == nil {
		if _, err := st.Recv(); err == nil {
			t.Fatal("a new stream was served after GracefulStop")
		}
	}
}

// TestStopEndsStreams: Stop ends handlers' streams and leaves no
// goroutine behind.
func TestStopEndsStreams(t *testing.T) {
	before := runtime.NumGoroutine()
	recvErr := make(chan error, 1)
	s, cc := serve(t, Config{KeepaliveTime: time.Hour}, func(st *Stream) error {
		var p client.Packet
		for {
			if err := st.RecvMsg(&p); err != nil {
				recvErr <- err
				return err
			}
		}
	})
	stream, err := client.NewProxyServiceClient(cc).Proxy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(data(10))
	time.Sleep(50 * time.Millisecond)
	s.Stop()
	select {
	case err := <-recvErr:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("RecvMsg after Stop: %v, want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's RecvMsg did not return after Stop")
	}
	_ = cc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Stop, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
