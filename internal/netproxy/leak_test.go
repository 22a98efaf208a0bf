package netproxy_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/portside-io/portside/internal/netproxy"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// rawFrontend opens a ProxyService stream without the client library, to
// misbehave: abandon dials, vanish without CLOSE_REQ.
func rawFrontend(t testing.TB, uds string) (client.ProxyService_ProxyClient, func()) {
	cc, err := grpc.NewClient("passthrough:///proxy", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", uds)
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream, func() { cancel(); cc.Close() }
}

// After thousands of dials, used, closed from either side, abandoned
// before or after the answer, or vanished, every goroutine and fd of the
// server and agent is gone.
func TestNoLeaks(t *testing.T) {
	dest := netproxytest.Listen(t, func(c net.Conn) {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		if b[0] == 'Q' { // destination closes first
			_, _ = c.Write([]byte("bye"))
			return
		}
		_, _ = io.Copy(c, c)
	})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			n := 2000
			if m.name != "streams-v1" || testing.Short() {
				n = 500
			}
			// PORTSIDE_NETPROXY_LEAK_DIALS=100000 runs the full
			// proof (minutes; not in `make test`).
			if v, err := strconv.Atoi(os.Getenv("PORTSIDE_NETPROXY_LEAK_DIALS")); err == nil && v > 0 {
				n = v
			}
			st := startStackFor(t, m, server.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second+time.Duration(n)*5*time.Millisecond)
			defer cancel()
			warm, err := dialUDS(ctx, st.uds, dest)
			if err != nil {
				t.Fatal(err)
			}
			warm.Close()
			time.Sleep(200 * time.Millisecond)
			runtime.GC()
			runtime.GC()
			baseG, baseFD := runtime.NumGoroutine(), openFDs()

			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i := 0; i < n; i++ {
				wg.Add(1)
				sem <- struct{}{}
				go func(i int) {
					defer wg.Done()
					defer func() { <-sem }()
					leakCase(t, ctx, st.uds, dest, i%5)
				}(i)
			}
			wg.Wait()

			deadline := time.Now().Add(20 * time.Second)
			for runtime.NumGoroutine() > baseG+10 || openFDs() > baseFD+5 {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					describeFDs(t)
					t.Fatalf("leak: goroutines %d (baseline %d), fds %d (baseline %d)\n%s", runtime.NumGoroutine(), baseG,
						openFDs(), baseFD, buf[:runtime.Stack(buf, true)])
				}
				// io.Copy between TCP sockets splices through pooled pipes,
				// released only when the pool is collected.
				runtime.GC()
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%d dials: goroutines %d (baseline %d), fds %d (baseline %d)", n, runtime.NumGoroutine(), baseG, openFDs(), baseFD)
		})
	}
}

func leakCase(t *testing.T, ctx context.Context, uds, dest string, kind int) {
	switch kind {
	case 0, 1: // normal use, closed by the frontend
		c, err := dialUDS(ctx, uds, dest)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = c.Write([]byte{'E'})
		if err := roundTrip(c, 1+rand.IntN(100<<10)); err != nil {
			t.Error(err)
		}
		c.Close()
	case 2: // the destination closes first
		c, err := dialUDS(ctx, uds, dest)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = c.Write([]byte{'Q'})
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	case 3: // abandoned: DIAL_REQ then the frontend vanishes
		stream, closeFn := rawFrontend(t, uds)
		_ = stream.Send(netproxy.DialReq(rand.Int64(), "tcp", dest))
		if rand.IntN(2) == 0 {
			_ = stream.Send(netproxy.DialCls(0)) // unknown random: ignored
		}
		closeFn()
	case 4: // established, then the frontend vanishes without CLOSE_REQ
		stream, closeFn := rawFrontend(t, uds)
		random := rand.Int64()
		_ = stream.Send(netproxy.DialReq(random, "tcp", dest))
		pkt, err := stream.Recv()
		if err == nil && pkt.GetDialResponse().GetConnectID() != 0 {
			_ = stream.Send(netproxy.Data(pkt.GetDialResponse().ConnectID, []byte("Ex")))
			_, _ = stream.Recv()
		}
		closeFn()
	}
}

func describeFDs(t *testing.T) {
	ents, _ := os.ReadDir("/proc/self/fd")
	inodes := map[string]string{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6", "/proc/self/net/unix"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) > 9 {
				if strings.HasSuffix(f, "unix") {
					inodes[fs[6]] = f + " " + strings.Join(fs[1:], " ")
				} else {
					inodes[fs[9]] = f + " " + fs[1] + " " + fs[2] + " st=" + fs[3]
				}
			}
		}
	}
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		ino := strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")
		t.Logf("fd %s -> %s %s", e.Name(), l, inodes[ino])
	}
}

// HTTP-CONNECT clients over portside-link/2 that stop reading mid-download
// and then close: the server's link reader wrote to them without waiting
// (trywrite.go) until their sockets filled, each leaving a flusher
// goroutine that waits for a reader that never comes. Closing ends every
// one of them, and the connections' goroutines and fds.
func TestNoLeaksHTTPConnectStalledClients(t *testing.T) {
	src := netproxytest.Listen(t, sizedSource)
	pki := netproxytest.NewPKI(t)
	st := startStackFor(t, mode{name: "portside-link", link: true}, server.Options{Mode: server.ModeHTTPConnect,
		FrontendTLS: pki.ServerTLS(t)})
	warm, err := dialConnect(st.srv.FrontendAddr().String(), pki.ClientTLS(t, "kube-apiserver"), src)
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Close()
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	baseG, baseFD := runtime.NumGoroutine(), openFDs()
	var conns []net.Conn
	for range 8 {
		c, err := dialConnect(st.srv.FrontendAddr().String(), pki.ClientTLS(t, "kube-apiserver"), src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(lengthHeader(64 << 20)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// Closed first if the test fails: the agent's clean-up drains
		// without a timeout, and would wait for these forever.
		t.Cleanup(func() { _ = c.Close() })
	}
	// Until the stalled clients' sockets are full: a flusher waits on each
	// client whose socket took only part of a payload (-race and a loaded
	// 2-core CI machine fill 8 sockets slowly). A socket whose buffers
	// grew to hold the connection's whole window (1 MiB) takes every
	// payload whole and gets no flusher: so wait for one per client, or
	// for the count to settle, and require at least one.
	flushers := func() int {
		buf := make([]byte, 4<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*tryConn).flush")
	}
	n, last, since := 0, -1, time.Now()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n = flushers(); n >= len(conns) {
			break
		}
		if n != last {
			last, since = n, time.Now()
		} else if n > 0 && time.Since(since) > 5*time.Second {
			break
		}
	}
	if n == 0 {
		t.Fatalf("no flusher for any of %d stalled clients after 60 s: the stalled path is not exercised", len(conns))
	}
	t.Logf("%d of %d stalled clients have a flusher", n, len(conns))
	for _, c := range conns {
		_ = c.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > baseG+5 || openFDs() > baseFD+5 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("leak: goroutines %d (baseline %d), fds %d (baseline %d)\n%s", runtime.NumGoroutine(), baseG,
				openFDs(), baseFD, buf[:runtime.Stack(buf, true)])
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	// The proxy still serves.
	c, err := dialConnect(st.srv.FrontendAddr().String(), pki.ClientTLS(t, "kube-apiserver"), src)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := download(c, 1<<20, io.Discard, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
}
