package netproxy_test

import (
	"context"

	"encoding/binary"
	"github.com/portside-io/portside/internal/netproxy/agent"
	"io"
	"net"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// sizedSource reads an 8-byte length and writes that many bytes.
func sizedSource(c net.Conn) {
	var hdr [8]byte
	buf := make([]byte, 256<<10)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		for n := int64(binary.BigEndian.Uint64(hdr[:])); n > 0; {
			k := min(n, int64(len(buf)))
			if _, err := c.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	}
}

func benchModes(b *testing.B, f func(b *testing.B, st *stack, dest string)) {
	dest := netproxytest.Listen(b, sizedSource)
	for _, m := range modes[:2] {
		b.Run(m.name, func(b *testing.B) {
			st := startStackB(b, m.serverLegacy, m.agentLegacy)
			f(b, st, dest)
		})
	}
}

func startStackB(b *testing.B, serverLegacy, agentLegacy bool) *stack {
	so := server.Options{UDSName: b.TempDir() + "/p.sock", DisableStreams: serverLegacy}
	s := netproxytest.StartServer(b, so)
	a, stop := netproxytest.StartAgent(b, agentOpts(s, agentLegacy))
	netproxytest.Eventually(b, 5*time.Second, s.Ready, "agent connected")
	return &stack{srv: s, uds: so.UDSName, agent: a, stop: stop}
}

// BenchmarkDownload: bytes from the destination to a gRPC frontend.
func BenchmarkDownload(b *testing.B) {
	benchModes(b, func(b *testing.B, st *stack, dest string) {
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
			var hdr [8]byte
			binary.BigEndian.PutUint64(hdr[:], chunk)
			if _, err := c.Write(hdr[:]); err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, chunk), buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSmallRequest: one 8-byte request, 100-byte answer, round trip.
func BenchmarkSmallRequest(b *testing.B) {
	benchModes(b, func(b *testing.B, st *stack, dest string) {
		c, err := dialUDS(context.Background(), st.uds, dest)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], 100)
		buf := make([]byte, 100)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Write(hdr[:]); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDirectSmallRequest is the same without the proxy, to subtract.
func BenchmarkDirectSmallRequest(b *testing.B) {
	dest := netproxytest.Listen(b, sizedSource)
	c, err := net.Dial("tcp", dest)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], 100)
	buf := make([]byte, 100)
	for i := 0; i < b.N; i++ {
		_, _ = c.Write(hdr[:])
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDial: a full single-use tunnel, dial, one exchange and close,
// as kube-apiserver does per request.
func BenchmarkDial(b *testing.B) {
	benchModes(b, func(b *testing.B, st *stack, dest string) {
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], 1)
		// kube-apiserver dials from many goroutines at once.
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 1)
			for pb.Next() {
				c, err := dialUDS(context.Background(), st.uds, dest)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = c.Write(hdr[:])
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Error(err)
				}
				c.Close()
			}
		})
	})
}

func agentOpts(s *server.Server, legacy bool) agent.Options {
	return agent.Options{ServerAddress: s.AgentAddr().String(), AgentID: "bench", DisableStreams: legacy}
}

// sink reads an 8-byte length, consumes that many bytes and acknowledges.
func sink(c net.Conn) {
	var hdr [8]byte
	buf := make([]byte, 256<<10)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, int64(binary.BigEndian.Uint64(hdr[:]))), buf); err != nil {
			return
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return
		}
	}
}

// BenchmarkUpload: bytes from a gRPC frontend to the destination, in
// 256 KiB writes.
func BenchmarkUpload(b *testing.B) {
	dest := netproxytest.Listen(b, sink)
	for _, m := range modes[:2] {
		b.Run(m.name, func(b *testing.B) {
			st := startStackB(b, m.serverLegacy, m.agentLegacy)
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
				var hdr [8]byte
				binary.BigEndian.PutUint64(hdr[:], chunk)
				if _, err := c.Write(hdr[:]); err != nil {
					b.Fatal(err)
				}
				for n := 0; n < chunk; n += len(buf) {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := io.ReadFull(c, hdr[:1]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
