package netproxy_test

// Benchmarks of the in-process proxy (server and agent in this process,
// konnectivity-client frontends over the unix socket), and
// TestBenchHarnessSmoke, which runs each benchmark's own harness at a tiny
// scale in `go test` and checks what it moved: a harness that stops
// carrying its bytes, or counts bytes it never received, fails there
// rather than yielding a figure.

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// benchPattern is what the destinations send and the frontends upload:
// not zeros, so that a smoke test can tell bytes that arrived from bytes
// that were lost, repeated or reordered.
var benchPattern = func() []byte {
	b := make([]byte, 256<<10)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}()

// patternSum is the FNV-64a hash of the n bytes a sized writer sends:
// benchPattern, repeated, cut at n.
func patternSum(n int64) uint64 {
	h := fnv.New64a()
	_ = writePattern(h, n)
	return h.Sum64()
}

// writePattern writes n bytes of the pattern to w.
func writePattern(w io.Writer, n int64) error {
	for ; n > 0; n -= int64(len(benchPattern)) {
		if _, err := w.Write(benchPattern[:min(n, int64(len(benchPattern)))]); err != nil {
			return err
		}
	}
	return nil
}

func lengthHeader(n int64) []byte {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	return hdr[:]
}

// sizedSource reads an 8-byte length and writes that many bytes.
func sizedSource(c net.Conn) {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		if err := writePattern(c, int64(binary.BigEndian.Uint64(hdr[:]))); err != nil {
			return
		}
	}
}

// counted wraps a destination handler, counting the connections it took.
func counted(n *atomic.Int64, handle func(net.Conn)) func(net.Conn) {
	return func(c net.Conn) { n.Add(1); handle(c) }
}

// benchStack starts a server and an agent in the mode given, asserting it
// negotiated the protocol the mode is named after.
func benchStack(tb testing.TB, serverLegacy, agentLegacy bool) *stack {
	tb.Helper()
	so := server.Options{UDSName: tb.TempDir() + "/p.sock", DisableStreams: serverLegacy}
	s := netproxytest.StartServer(tb, so)
	a, stop := netproxytest.StartAgent(tb, agentOpts(s, agentLegacy))
	netproxytest.Eventually(tb, 5*time.Second, s.Ready, "agent connected")
	assertProtocol(tb, s, a, !serverLegacy && !agentLegacy)
	return &stack{srv: s, uds: so.UDSName, agent: a, stop: stop}
}

func agentOpts(s *server.Server, legacy bool) agent.Options {
	return agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "bench", DisableStreams: legacy}
}

// benchModes are the modes benchmarked: streams-v1 and, to compare,
// upstream's protocol.
var benchModes = modes[:2]

func forBenchModes(b *testing.B, dest string, f func(b *testing.B, st *stack, dest string)) {
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			f(b, benchStack(b, m.serverLegacy, m.agentLegacy), dest)
		})
	}
}

// download asks a sizedSource on c for n bytes and copies them to w. It
// fails unless all n arrive (io.Copy takes an early EOF for success).
func download(c net.Conn, n int64, w io.Writer, buf []byte) error {
	if _, err := c.Write(lengthHeader(n)); err != nil {
		return err
	}
	got, err := io.CopyBuffer(w, io.LimitReader(c, n), buf)
	if err == nil && got != n {
		err = fmt.Errorf("received %d of %d bytes", got, n)
	}
	return err
}

// smallRequest sends one 8-byte request to a sizedSource on c and reads
// its len(buf)-byte answer into buf.
func smallRequest(c net.Conn, buf []byte) error {
	if _, err := c.Write(lengthHeader(int64(len(buf)))); err != nil {
		return err
	}
	_, err := io.ReadFull(c, buf)
	return err
}

// dialExchange is what kube-apiserver does per request: a single-use
// tunnel, a dial, one exchange (one byte from a sizedSource), a close.
func dialExchange(uds, dest string) error {
	c, err := dialUDS(context.Background(), uds, dest)
	if err != nil {
		return err
	}
	defer c.Close()
	var b [1]byte
	return smallRequest(c, b[:])
}

// sink reads an 8-byte length, consumes that many bytes into the writer
// into returns (io.Discard when benchmarking) and acknowledges with one
// byte.
func sink(into func() io.Writer) func(net.Conn) {
	return func(c net.Conn) {
		var hdr [8]byte
		buf := make([]byte, 256<<10)
		for {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			if _, err := io.CopyBuffer(into(), io.LimitReader(c, int64(binary.BigEndian.Uint64(hdr[:]))), buf); err != nil {
				return
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}
}

func discard() io.Writer { return io.Discard }

// upload sends n bytes of the pattern to a sink on c, in 256 KiB writes,
// and waits for its acknowledgement.
func upload(c net.Conn, n int64) error {
	if _, err := c.Write(lengthHeader(n)); err != nil {
		return err
	}
	if err := writePattern(c, n); err != nil {
		return err
	}
	var ack [1]byte
	_, err := io.ReadFull(c, ack[:])
	return err
}

// BenchmarkDownload: bytes from the destination to a gRPC frontend.
func BenchmarkDownload(b *testing.B) {
	forBenchModes(b, netproxytest.Listen(b, sizedSource), func(b *testing.B, st *stack, dest string) {
		c, err := dialUDS(context.Background(), st.uds, dest)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		const chunk = 64 << 20
		buf := make([]byte, 256<<10)
		b.SetBytes(chunk)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := download(c, chunk, io.Discard, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSmallRequest: one 8-byte request, 100-byte answer, round trip.
func BenchmarkSmallRequest(b *testing.B) {
	forBenchModes(b, netproxytest.Listen(b, sizedSource), func(b *testing.B, st *stack, dest string) {
		c, err := dialUDS(context.Background(), st.uds, dest)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 100)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := smallRequest(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDirectSmallRequest is the same without the proxy, to subtract.
func BenchmarkDirectSmallRequest(b *testing.B) {
	c, err := net.Dial("tcp", netproxytest.Listen(b, sizedSource))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 100)
	for i := 0; i < b.N; i++ {
		if err := smallRequest(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDial: a full single-use tunnel, dial, one exchange and close,
// as kube-apiserver does per request.
func BenchmarkDial(b *testing.B) {
	forBenchModes(b, netproxytest.Listen(b, sizedSource), func(b *testing.B, st *stack, dest string) {
		// kube-apiserver dials from many goroutines at once.
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := dialExchange(st.uds, dest); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkUpload: bytes from a gRPC frontend to the destination, in
// 256 KiB writes.
func BenchmarkUpload(b *testing.B) {
	forBenchModes(b, netproxytest.Listen(b, sink(discard)), func(b *testing.B, st *stack, dest string) {
		c, err := dialUDS(context.Background(), st.uds, dest)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		const chunk = 64 << 20
		b.SetBytes(chunk)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := upload(c, chunk); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// hashWriter records, under a lock (the sink writes from its own
// goroutine), how many bytes a sink consumed and their hash.
type hashWriter struct {
	mu sync.Mutex
	n  int64
	h  hash.Hash64
}

func newHashWriter() *hashWriter { return &hashWriter{h: fnv.New64a()} }

func (w *hashWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += int64(len(p))
	return w.h.Write(p)
}

func (w *hashWriter) result() (int64, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.h.Sum64()
}

// TestBenchHarnessSmoke runs the benchmarks' harnesses at a tiny scale, in
// every benchmarked mode, and checks counts and content: the bytes each
// one moved arrived, all of them, in order; every dial reached the
// destination.
func TestBenchHarnessSmoke(t *testing.T) {
	// Not multiples of the 256 KiB writes: the last one is partial.
	const size = 3<<20 + 12345
	var dialed atomic.Int64
	source := netproxytest.Listen(t, counted(&dialed, sizedSource))

	t.Run("direct small request", func(t *testing.T) {
		c, err := net.Dial("tcp", source)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkSmallRequests(t, c)
	})
	for _, m := range benchModes {
		t.Run(m.name, func(t *testing.T) {
			st := benchStack(t, m.serverLegacy, m.agentLegacy)

			t.Run("download", func(t *testing.T) {
				c, err := dialUDS(context.Background(), st.uds, source)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				for i := range 2 { // twice: the next request follows the last one's bytes
					h := fnv.New64a()
					if err := download(c, size, h, make([]byte, 256<<10)); err != nil {
						t.Fatalf("download %d: %v", i, err)
					}
					if h.Sum64() != patternSum(size) {
						t.Fatalf("download %d: content differs from what the destination sent", i)
					}
				}
			})

			t.Run("small request", func(t *testing.T) {
				c, err := dialUDS(context.Background(), st.uds, source)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				checkSmallRequests(t, c)
			})

			t.Run("dial", func(t *testing.T) {
				const workers, each = 4, 4
				before := dialed.Load()
				var wg sync.WaitGroup
				errs := make(chan error, workers*each)
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range each {
							errs <- dialExchange(st.uds, source)
						}
					}()
				}
				wg.Wait()
				close(errs)
				ok := 0
				for err := range errs {
					if err != nil {
						t.Error(err)
						continue
					}
					ok++
				}
				if ok != workers*each {
					t.Errorf("%d of %d dials exchanged a byte", ok, workers*each)
				}
				// Each exchange read the destination's answer, so each
				// connection was accepted (and counted) before it returned.
				if got := dialed.Load() - before; got != workers*each {
					t.Errorf("destination took %d connections, want %d", got, workers*each)
				}
			})

			t.Run("upload", func(t *testing.T) {
				uploaded := newHashWriter()
				c, err := dialUDS(context.Background(), st.uds, netproxytest.Listen(t, sink(func() io.Writer { return uploaded })))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				for i := range 2 {
					if err := upload(c, size); err != nil {
						t.Fatalf("upload %d: %v", i, err)
					}
				}
				// The sink acknowledges after consuming, so all of it is
				// recorded by now.
				n, sum := uploaded.result()
				if n != 2*size {
					t.Errorf("sink consumed %d bytes, want %d", n, 2*size)
				}
				want := fnv.New64a()
				_ = writePattern(want, size)
				_ = writePattern(want, size)
				if sum != want.Sum64() {
					t.Error("sink consumed content other than what was uploaded")
				}
			})
		})
	}
}

// checkSmallRequests makes ten of smallRequest's round trips on c and
// checks each answer is the destination's first 100 bytes.
func checkSmallRequests(t *testing.T, c net.Conn) {
	t.Helper()
	buf := make([]byte, 100)
	for range 10 {
		clear(buf)
		if err := smallRequest(c, buf); err != nil {
			t.Fatal(err)
		}
		if string(buf) != string(benchPattern[:100]) {
			t.Fatalf("answer %x, want %x", buf, benchPattern[:100])
		}
	}
}
