package dataplane

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// benchTarget is a backend and a load balancer in front of it: every
// benchmark measures the same work direct to the backend and through the
// VIP, in the same run, and reports the ratio.
type benchTarget struct {
	direct, vip string
}

func newBenchTarget(b *testing.B, handle func(net.Conn)) benchTarget {
	b.Helper()
	beIP := randomLoopback()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(beIP, 0).String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	p := New(context.Background(), Options{})
	b.Cleanup(p.Close)
	vip := randomLoopback()
	vport := 0
	for vport == 0 {
		l, err := net.Listen("tcp", netip.AddrPortFrom(vip, 0).String())
		if err != nil {
			b.Fatal(err)
		}
		vport = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	if err := p.Apply(Config{Name: "bench", VIPs: []netip.Addr{vip},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: vport, BackendPort: port}},
		Backends:  []api.Backend{{Name: "be", Address: beIP.String()}}}); err != nil {
		b.Fatal(err)
	}
	return benchTarget{direct: ln.Addr().String(), vip: netip.AddrPortFrom(vip, uint16(vport)).String()}
}

// BenchmarkThroughput sends 64 MiB one way per iteration, direct and
// through the VIP.
func BenchmarkThroughput(b *testing.B) {
	const size = 64 << 20
	t := newBenchTarget(b, func(c net.Conn) {
		defer func() { _ = c.Close() }()
		n, _ := io.Copy(io.Discard, c)
		_, _ = c.Write([]byte{byte(n >> 20)})
	})
	buf := make([]byte, 256<<10)
	send := func(addr string) time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		_ = c.(*net.TCPConn).CloseWrite()
		ack := make([]byte, 1)
		if _, err := io.ReadFull(c, ack); err != nil || int(ack[0]) != size>>20 {
			b.Fatalf("transfer incomplete: %v %d", err, ack[0])
		}
		_ = c.Close()
		return time.Since(start)
	}
	var direct, vip time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		direct += send(t.direct)
		vip += send(t.vip)
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(direct), "direct-MB/s")
	b.ReportMetric(mbps(vip), "vip-MB/s")
	b.ReportMetric(mbps(vip)/mbps(direct), "vip/direct")
}

// BenchmarkConnectionRate opens, uses (1-byte round trip) and closes
// connections from 8 clients at once, direct and through the VIP.
func BenchmarkConnectionRate(b *testing.B) {
	t := newBenchTarget(b, func(c net.Conn) {
		defer func() { _ = c.Close() }()
		one := make([]byte, 1)
		if _, err := c.Read(one); err == nil {
			_, _ = c.Write(one)
		}
	})
	const clients = 8
	run := func(addr string, conns int) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				one := []byte{1}
				for next.Add(1) <= int64(conns) {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := c.Write(one); err != nil {
						b.Error(err)
					}
					if _, err := io.ReadFull(c, one); err != nil {
						b.Error(err)
					}
					_ = c.Close()
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	const perIter = 200
	var direct, vip time.Duration
	b.ResetTimer()
	for range b.N {
		direct += run(t.direct, perIter)
		vip += run(t.vip, perIter)
	}
	rate := func(d time.Duration) float64 { return float64(perIter*b.N) / d.Seconds() }
	b.ReportMetric(rate(direct), "direct-conns/s")
	b.ReportMetric(rate(vip), "vip-conns/s")
	b.ReportMetric(rate(vip)/rate(direct), "vip/direct")
}

// BenchmarkRoundTrip measures a 64-byte request/response on an open
// connection, direct and through the VIP: the latency the hop adds.
func BenchmarkRoundTrip(b *testing.B) {
	t := newBenchTarget(b, func(c net.Conn) {
		defer func() { _ = c.Close() }()
		_, _ = io.Copy(c, c)
	})
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	dc, vc := dial(t.direct), dial(t.vip)
	msg := make([]byte, 64)
	rtt := func(c net.Conn) time.Duration {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var direct, vip time.Duration
	b.ResetTimer()
	for range b.N {
		direct += rtt(dc)
		vip += rtt(vc)
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(us(direct), "direct-µs/rtt")
	b.ReportMetric(us(vip), "vip-µs/rtt")
	b.ReportMetric(us(vip)-us(direct), "added-µs/rtt")
}
