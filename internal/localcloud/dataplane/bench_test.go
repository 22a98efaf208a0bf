package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/nginxtest"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// benchTarget is a backend and the proxies in front of it: every benchmark
// measures the same work, with the same client code, direct to the backend,
// through a Portside VIP and through nginx's stream proxy (when installed),
// interleaved in the same run, and reports the ratios to direct.
type benchTarget struct {
	names, addrs []string // "direct", "portside", maybe "nginx"
}

// newBenchTarget starts a backend running handle per connection, a
// Portside load balancer in front of it, and nginx if it can (installing
// it first with install, as benchmarks do).
func newBenchTarget(tb testing.TB, handle func(net.Conn), install bool) benchTarget {
	tb.Helper()
	beIP := randomLoopback()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(beIP, 0).String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
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
	tb.Cleanup(p.Close)
	vip := netip.MustParseAddrPort(freeLoopbackPort(tb))
	if err := p.Apply(Config{Name: "bench", VIPs: []netip.Addr{vip.Addr()},
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: int(vip.Port()), BackendPort: port}},
		Backends:  []api.Backend{{Name: "be", Address: beIP.String()}}}); err != nil {
		tb.Fatal(err)
	}
	t := benchTarget{names: []string{"direct", "portside"}, addrs: []string{ln.Addr().String(), vip.String()}}
	nb := nginxtest.Find(install)
	if nb.Missing != "" {
		tb.Logf("without nginx: %s", nb.Missing)
		return t
	}
	addr := freeLoopbackPort(tb)
	if err := nginxtest.Start(tb, nb, addr, ln.Addr().String()); err != nil {
		tb.Logf("without nginx: %v", err)
		return t
	}
	t.names, t.addrs = append(t.names, "nginx"), append(t.addrs, addr)
	return t
}

// report adds each contender's figure and its ratio to direct's (or, for
// latency, the difference) as metrics and one log table.
func (t benchTarget) report(b *testing.B, unit string, vals []float64, added bool) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-9s %12s %10s", "", unit, "vs direct")
	for i, name := range t.names {
		b.ReportMetric(vals[i], name+"-"+unit)
		rel := fmt.Sprintf("%.2fx", vals[i]/vals[0])
		if added {
			rel = fmt.Sprintf("%+.1f", vals[i]-vals[0])
		}
		if i > 0 {
			if added {
				b.ReportMetric(vals[i]-vals[0], name+"-added-"+unit)
			} else {
				b.ReportMetric(vals[i]/vals[0], name+"/direct")
			}
		}
		fmt.Fprintf(&table, "\n%-9s %12.1f %10s", name, vals[i], rel)
	}
	b.Log(table.String())
}

// bulkSink is the throughput backend: it reads to EOF and answers with the
// byte count (8 bytes), followed with hash by the FNV-64a of the bytes (the
// smoke test checks them; benchmarks do not pay for hashing).
func bulkSink(hash bool) func(net.Conn) {
	return func(c net.Conn) {
		defer func() { _ = c.Close() }()
		h := fnv.New64a()
		var w io.Writer = io.Discard
		if hash {
			w = h
		}
		// Large reads, as a receiving application sized for bulk data
		// makes them (io.Discard's 8 KiB made the receiver's syscalls
		// most of the machine's work); the same for every contender.
		n, _ := io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{c}, make([]byte, 256<<10))
		_, _ = c.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(n)), h.Sum64()))
	}
}

// sendBulk sends size bytes of buf (repeated) to addr, half-closes, and
// returns the time until the backend's answer: its count and hash.
func sendBulk(addr string, size int, buf []byte) (time.Duration, uint64, error) {
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = c.Close() }()
	for sent := 0; sent < size; sent += len(buf) {
		if _, err := c.Write(buf[:min(len(buf), size-sent)]); err != nil {
			return 0, 0, err
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	ack := make([]byte, 16)
	if _, err := io.ReadFull(c, ack); err != nil {
		return 0, 0, err
	}
	if n := binary.BigEndian.Uint64(ack); n != uint64(size) {
		return 0, 0, fmt.Errorf("backend got %d bytes of %d", n, size)
	}
	return time.Since(start), binary.BigEndian.Uint64(ack[8:]), nil
}

// BenchmarkThroughput sends 64 MiB one way per iteration and contender.
func BenchmarkThroughput(b *testing.B) {
	const size = 64 << 20
	t := newBenchTarget(b, bulkSink(false), true)
	buf := make([]byte, 256<<10)
	d := make([]time.Duration, len(t.addrs))
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		for i, addr := range t.addrs {
			took, _, err := sendBulk(addr, size, buf)
			if err != nil {
				b.Fatalf("%s: %v", t.names[i], err)
			}
			d[i] += took
		}
	}
	vals := make([]float64, len(d))
	for i := range d {
		vals[i] = float64(size) * float64(b.N) / d[i].Seconds() / 1e6
	}
	t.report(b, "MB/s", vals, false)
}

// echoOne is the connection-rate backend: it echoes one byte and closes;
// served counts the connections that sent one (health checks send none).
func echoOne(served *atomic.Int64) func(net.Conn) {
	return func(c net.Conn) {
		defer func() { _ = c.Close() }()
		one := make([]byte, 1)
		if _, err := c.Read(one); err == nil {
			served.Add(1)
			_, _ = c.Write(one)
		}
	}
}

// openConns opens, uses (a 1-byte round trip) and closes conns connections
// to addr from clients goroutines at once; it returns the time and how many
// completed.
func openConns(addr string, clients, conns int) (time.Duration, int64, error) {
	var next, done atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := next.Add(1); n <= int64(conns); n = next.Add(1) {
				if err := roundTripOne(addr, byte(n)); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return time.Since(start), done.Load(), firstErr
}

func roundTripOne(addr string, v byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	one := []byte{v}
	if _, err := c.Write(one); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, one); err != nil {
		return err
	}
	if one[0] != v {
		return errors.New("echoed byte differs")
	}
	return nil
}

// BenchmarkConnectionRate opens, uses and closes 200 connections per
// iteration and contender from 8 clients at once.
func BenchmarkConnectionRate(b *testing.B) {
	const clients, perIter = 8, 200
	t := newBenchTarget(b, echoOne(new(atomic.Int64)), true)
	d := make([]time.Duration, len(t.addrs))
	b.ResetTimer()
	for range b.N {
		for i, addr := range t.addrs {
			took, _, err := openConns(addr, clients, perIter)
			if err != nil {
				b.Fatalf("%s: %v", t.names[i], err)
			}
			d[i] += took
		}
	}
	vals := make([]float64, len(d))
	for i := range d {
		vals[i] = float64(perIter*b.N) / d[i].Seconds()
	}
	t.report(b, "conns/s", vals, false)
}

// echoAll is the round-trip backend: it echoes everything.
func echoAll(c net.Conn) {
	defer func() { _ = c.Close() }()
	_, _ = io.Copy(c, c)
}

// roundTrip writes msg and reads the echo into reply; it checks the echo.
func roundTrip(c net.Conn, msg, reply []byte) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, reply); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if string(reply) != string(msg) {
		return 0, errors.New("echo differs")
	}
	return took, nil
}

// BenchmarkRoundTrip measures a 64-byte request/response on an open
// connection per contender: the latency each hop adds.
func BenchmarkRoundTrip(b *testing.B) {
	t := newBenchTarget(b, echoAll, true)
	conns := make([]net.Conn, len(t.addrs))
	for i, addr := range t.addrs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	msg, reply := make([]byte, 64), make([]byte, 64)
	d := make([]time.Duration, len(t.addrs))
	b.ResetTimer()
	for n := range b.N {
		msg[0] = byte(n)
		for i, c := range conns {
			took, err := roundTrip(c, msg, reply)
			if err != nil {
				b.Fatalf("%s: %v", t.names[i], err)
			}
			d[i] += took
		}
	}
	vals := make([]float64, len(d))
	for i := range d {
		vals[i] = float64(d[i].Nanoseconds()) / 1e3 / float64(b.N)
	}
	t.report(b, "µs/rtt", vals, true)
}

// TestBenchSmoke runs each benchmark's measurement once at tiny sizes for
// every contender (nginx only if installed: `make test` installs nothing)
// and checks the bytes and connections arrived; no timing is asserted.
func TestBenchSmoke(t *testing.T) {
	t.Run("throughput", func(t *testing.T) {
		bt := newBenchTarget(t, bulkSink(true), false)
		buf := make([]byte, 4096)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		const size = 100_000 // not a multiple of buf: the tail is partial
		want := fnv.New64a()
		for sent := 0; sent < size; sent += len(buf) {
			_, _ = want.Write(buf[:min(len(buf), size-sent)])
		}
		for i, addr := range bt.addrs {
			_, sum, err := sendBulk(addr, size, buf)
			if err != nil || sum != want.Sum64() {
				t.Errorf("%s: hash %x, want %x (err %v)", bt.names[i], sum, want.Sum64(), err)
			}
		}
	})
	t.Run("connection rate", func(t *testing.T) {
		var served atomic.Int64
		bt := newBenchTarget(t, echoOne(&served), false)
		for i, addr := range bt.addrs {
			before := served.Load()
			_, done, err := openConns(addr, 4, 20)
			if err != nil || done != 20 {
				t.Errorf("%s: %d of 20 connections (err %v)", bt.names[i], done, err)
			}
			if got := served.Load() - before; got != 20 {
				t.Errorf("%s: backend served %d connections, want 20", bt.names[i], got)
			}
		}
	})
	t.Run("round trip", func(t *testing.T) {
		bt := newBenchTarget(t, echoAll, false)
		for i, addr := range bt.addrs {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			msg, reply := []byte(strings.Repeat("0123456789abcdef", 4)), make([]byte, 64)
			for range 3 {
				if _, err := roundTrip(c, msg, reply); err != nil {
					t.Errorf("%s: %v", bt.names[i], err)
				}
			}
			_ = c.Close()
		}
	})
}
