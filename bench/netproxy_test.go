package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkNetworkProxy: Portside's network proxy (`portside proxy-server`
// + `portside proxy-agent`) against upstream apiserver-network-proxy
// v0.34.0's proxy-server + proxy-agent, both as child processes started
// with the same upstream flags, side by side in one run, and a direct
// connection as the baseline. The path is kube-apiserver's: client →
// server frontend → agent (mTLS, one agent) → a destination on loopback in
// the benchmark process. Frontends, as kube-apiserver's egress selector
// speaks them:
//
//   - grpc: gRPC over a unix socket, a single-use tunnel per connection
//     (konnectivity-client's CreateSingleUseGrpcTunnel, then DialContext);
//   - http-connect: HTTP CONNECT over TCP with mTLS, a TLS connection per
//     connection (upstream's TCP frontend always wants a certificate).
//
// Measured for each contender (rounds interleave the contenders, in
// alternating order, and are pooled):
//
//   - throughput: one connection sends PORTSIDE_BENCH_NETPROXY_MB MiB
//     (default 256) in PORTSIDE_BENCH_NETPROXY_WRITE_KB writes (32, io.Copy's
//     buffer) to a sink; MB/s, the ratio to direct, and the proxy's CPU per
//     GiB (server + agent utime+stime from /proc/<pid>/stat);
//   - latency: PORTSIDE_BENCH_NETPROXY_RTTS (5000) 64-byte round trips on one
//     connection to an echo server; p50 and p99, and what the proxy adds to
//     direct's;
//   - dials: PORTSIDE_BENCH_NETPROXY_DIALERS (8) clients open a connection
//     (for grpc: a single-use tunnel, as kube-apiserver), make one 1-byte
//     round trip and close it, for PORTSIDE_BENCH_NETPROXY_DIAL_TIME (2s);
//   - hol (head-of-line): connection A sends PORTSIDE_BENCH_NETPROXY_HOL_MB
//     (64) MiB alone, then again while connection B, through the same agent,
//     goes to a destination that stops reading (B's data backs up until its
//     writes block), then alone again; A's slowdown (against the mean of
//     before and after), how much B got in flight, and whether the proxy
//     carries new connections once B's destination is gone.
//
// PORTSIDE_BENCH_NETPROXY_ROUNDS (3) rounds; PORTSIDE_BENCH_NETPROXY_IMPLS
// (direct,upstream,portside) picks the contenders and
// PORTSIDE_BENCH_NETPROXY_MODES (grpc,http-connect) the frontends, where
// http-connect-uds adds HTTP CONNECT over a unix socket (plaintext, no TLS
// handshake per dial);
// PORTSIDE_BENCH_NETPROXY_PROFILE=<dir> also takes 5 s CPU profiles of
// each proxy's server and agent under bulk traffic and under dials (their
// /debug/pprof on the admin ports). Portside is built once from this
// checkout, or taken from PORTSIDE_BENCH_PORTSIDE_BIN. A quick run:
//
//	PORTSIDE_BENCH_NETPROXY_ROUNDS=1 PORTSIDE_BENCH_NETPROXY_MB=64 PORTSIDE_BENCH_NETPROXY_RTTS=1000 \
//	PORTSIDE_BENCH_NETPROXY_DIAL_TIME=1s go test -short -run '^$' -bench NetworkProxy ./bench/
//
// (-short skips the kube-apiserver the package starts for the other
// benchmarks: this one does not use it.)
func BenchmarkNetworkProxy(b *testing.B) {
	cfg := npConfigFromEnv()
	bins := npBinaries(b, slices.Contains(cfg.impls, npPortside) || slices.Contains(cfg.impls, npPortsideGRPC))
	for _, mode := range cfg.modes {
		b.Run(mode, func(b *testing.B) { benchNPMode(b, mode, cfg, bins) })
	}
}

// TestNetworkProxySmoke runs BenchmarkNetworkProxy's harness, every
// contender on both frontends, at a tiny scale, with the sink checking
// every byte, and checks that each phase measured what it says: the bulk
// bytes all arrived as sent, every round trip echoed its own message,
// every counted dial reached the destination, and the head-of-line phase
// ran (a backlog built up, A moved its bytes before and after, the proxy
// recovered). Portside's head-of-line isolation is checked by the tests
// in internal/netproxy and test/integration/netproxy; here only that the
// harness can still measure it: Portside and direct are not stuck beside
// the stalled connection.
func TestNetworkProxySmoke(t *testing.T) {
	cfg := npConfig{
		bulkBytes: 16<<20 + 12345, // not a multiple of the writes: the last one is partial
		holBytes:  1 << 20,
		writeSize: 32 << 10,
		rtts:      50,
		dialers:   2,
		dialTime:  300 * time.Millisecond,
		rounds:    1,
		modes:     []string{npModeGRPC, npModeHTTPConnect},
		impls:     []string{npDirect, npUpstream, npPortside},
		verify:    true,
	}
	bins := npBinaries(t, true)
	for _, mode := range cfg.modes {
		t.Run(mode, func(t *testing.T) {
			res, table := runNPMode(t, mode, cfg, bins)
			t.Log("\n" + table)
			rounds := int64(cfg.rounds)
			for _, impl := range cfg.impls {
				r := res[impl]
				if r.bulkBytes != rounds*cfg.bulkBytes || len(r.bulkRounds) != cfg.rounds {
					t.Errorf("%s: bulk moved %d bytes in %d rounds, want %d in %d", impl, r.bulkBytes, len(r.bulkRounds), rounds*cfg.bulkBytes, cfg.rounds)
				}
				// /proc counts CPU in 10 ms ticks, and a few MiB through
				// Portside's proxy can cost less than one: the probe is
				// proven on the processes' whole CPU time so far instead.
				if impl != npDirect && (r.proxyCPUTotal <= 0 || r.serverCPU+r.agentCPU < 0) {
					t.Errorf("%s: the proxy processes' CPU time is not measured (%.3f s in all, %.3f s over the bulk transfer)", impl, r.proxyCPUTotal, r.serverCPU+r.agentCPU)
				}
				if len(r.rtts) != cfg.rounds*cfg.rtts {
					t.Errorf("%s: %d round trips timed, want %d", impl, len(r.rtts), cfg.rounds*cfg.rtts)
				}
				if r.dials == 0 || r.dialErrs != 0 || r.dialsSeen != r.dials {
					t.Errorf("%s: %d dials counted (%d failed), the echo server took %d; want some, none failed, all taken", impl, r.dials, r.dialErrs, r.dialsSeen)
				}
				if r.holAloneBytes != 2*rounds*cfg.holBytes {
					t.Errorf("%s: head-of-line: A moved %d bytes alone, want %d (before and after)", impl, r.holAloneBytes, 2*rounds*cfg.holBytes)
				}
				if r.holBacklog <= 0 || r.holNoBackpressure {
					t.Errorf("%s: head-of-line: stalled backlog %d bytes (no backpressure: %v)", impl, r.holBacklog, r.holNoBackpressure)
				}
				if r.holUnrecovered != 0 {
					t.Errorf("%s: head-of-line: the proxy did not carry new connections after the stall in %d rounds", impl, r.holUnrecovered)
				}
				if impl != npUpstream && (r.holTimeouts != 0 || r.holStalledBytes != rounds*cfg.holBytes) {
					t.Errorf("%s: head-of-line: beside the stalled connection A moved %d of %d bytes (%d rounds stuck)", impl, r.holStalledBytes, rounds*cfg.holBytes, r.holTimeouts)
				}
			}
		})
	}
}

type npConfig struct {
	bulkBytes, holBytes int64
	writeSize           int
	rtts                int
	dialers             int
	dialTime            time.Duration
	rounds              int
	modes, impls        []string
	profileDir          string
	// verify has the sink check every byte it reads against what was sent
	// (TestNetworkProxySmoke; off when measuring, it costs the sink CPU).
	verify bool
}

func npConfigFromEnv() npConfig {
	c := npConfig{
		bulkBytes: int64(envInt("PORTSIDE_BENCH_NETPROXY_MB", 256)) << 20,
		holBytes:  int64(envInt("PORTSIDE_BENCH_NETPROXY_HOL_MB", 64)) << 20,
		writeSize: envInt("PORTSIDE_BENCH_NETPROXY_WRITE_KB", 32) << 10,
		rtts:      envInt("PORTSIDE_BENCH_NETPROXY_RTTS", 5000),
		dialers:   envInt("PORTSIDE_BENCH_NETPROXY_DIALERS", 8),
		dialTime:  2 * time.Second,
		rounds:    envInt("PORTSIDE_BENCH_NETPROXY_ROUNDS", 3),
		modes:     []string{npModeGRPC, npModeHTTPConnect},
		impls:     []string{npDirect, npUpstream, npPortside},
	}
	if v := os.Getenv("PORTSIDE_BENCH_NETPROXY_MODES"); v != "" {
		c.modes = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == npModeGRPC || s == npModeHTTPConnect || s == npModeHTTPConnectUDS {
				c.modes = append(c.modes, s)
			}
		}
	}
	if d, err := time.ParseDuration(os.Getenv("PORTSIDE_BENCH_NETPROXY_DIAL_TIME")); err == nil && d > 0 {
		c.dialTime = d
	}
	if v := os.Getenv("PORTSIDE_BENCH_NETPROXY_IMPLS"); v != "" {
		c.impls = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == npDirect || s == npUpstream || s == npPortside || s == npPortsideGRPC {
				c.impls = append(c.impls, s)
			}
		}
		// Direct is the baseline of every ratio.
		if !slices.Contains(c.impls, npDirect) {
			c.impls = append([]string{npDirect}, c.impls...)
		}
	}
	c.profileDir = os.Getenv("PORTSIDE_BENCH_NETPROXY_PROFILE")
	return c
}

// npResult pools one contender's measurements over the rounds.
type npResult struct {
	bulkBytes                    int64
	bulkTime                     time.Duration
	bulkRounds                   []float64 // MB/s per round
	serverCPU, agentCPU, selfCPU float64   // seconds, over the bulk transfers
	proxyCPUTotal                float64   // seconds, server + agent since they started, at the last bulk's end
	bulkPackets                  float64   // DATA packets the server sent the agent (its metrics)

	rtts []time.Duration

	dials, dialErrs int64
	firstDialErr    error
	// closeRaces counts dials whose Close met the konnectivity client's
	// race (npDials); they are counted in dials.
	closeRaces  int64
	dialsSeen   int64 // connections the echo server took during the dials
	dialTime    time.Duration
	dialCPU     float64 // server + agent seconds over the dial phases
	dialSelfCPU float64 // the benchmark process's (clients, echo server)

	holAloneBytes, holStalledBytes int64
	holAloneTime, holStalledTime   time.Duration
	holBacklog                     int64 // bytes B had written when its writes blocked (max over rounds)
	holTimeouts, holUnrecovered    int
	holNoBackpressure              bool
}

func (r *npResult) mbps() float64 { return mbps(r.bulkBytes, r.bulkTime) }

func (r *npResult) cpuPerGiB() float64 {
	return (r.serverCPU + r.agentCPU) / (float64(r.bulkBytes) / (1 << 30))
}

func (r *npResult) dialRate() float64 { return float64(r.dials) / r.dialTime.Seconds() }

func (r *npResult) percentile(p int) time.Duration {
	if len(r.rtts) == 0 {
		return 0
	}
	s := slices.Clone(r.rtts)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func (r *npResult) holSlowdown() float64 {
	alone, stalled := mbps(r.holAloneBytes, r.holAloneTime), mbps(r.holStalledBytes, r.holStalledTime)
	return 100 * (1 - stalled/alone)
}

func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e6
}

func benchNPMode(b *testing.B, mode string, cfg npConfig, bins npBins) {
	res, table := runNPMode(b, mode, cfg, bins)
	// b.Log of a benchmark with sub-benchmarks shows only with -v.
	if testing.Verbose() {
		b.Log("\n" + table)
	} else {
		fmt.Print(table)
	}
	npReport(b, cfg, res)
}

// runNPMode starts the contenders' stacks for one frontend mode, measures
// them in interleaved rounds and returns their results and the table.
func runNPMode(b testing.TB, mode string, cfg npConfig, bins npBins) (map[string]*npResult, string) {
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "npb-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("keeping %s (proxy logs)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	pki := newNPPKI(b, dir)
	dest := startNPDest(b, cfg.verify)
	stacks := map[string]*npStack{}
	dialers := map[string]npDialer{npDirect: directDialer{}}
	for _, impl := range cfg.impls {
		if impl != npDirect {
			stacks[impl] = startNPStack(b, impl, mode, dir, bins, pki)
			dialers[impl] = stacks[impl].dialer
		}
	}
	// Every path works, and connections are warm (TLS, gRPC, agent).
	for _, impl := range cfg.impls {
		if err := npEcho(dialers[impl], dest.echo); err != nil {
			b.Fatalf("%s %s: first connection: %v%s", mode, impl, err, stackLogs(stacks[impl]))
		}
	}
	load0 := loadAvg()
	start := time.Now()
	res := map[string]*npResult{}
	for _, impl := range cfg.impls {
		res[impl] = &npResult{}
	}
	// Round r runs the contenders forwards or backwards, so that drift in
	// the machine's load does not favour one.
	order := func(r int) []string {
		o := slices.Clone(cfg.impls)
		if r%2 == 1 {
			slices.Reverse(o)
		}
		return o
	}
	check := func(impl string, what string, err error) {
		if err != nil {
			b.Fatalf("%s %s %s: %v%s", mode, impl, what, err, stackLogs(stacks[impl]))
		}
	}
	for r := range cfg.rounds {
		for _, impl := range order(r) {
			check(impl, "throughput", npBulk(dialers[impl], dest, stacks[impl], cfg, res[impl]))
		}
	}
	for r := range cfg.rounds {
		for _, impl := range order(r) {
			check(impl, "latency", npLatency(dialers[impl], dest, cfg, res[impl]))
		}
	}
	for r := range cfg.rounds {
		for _, impl := range order(r) {
			check(impl, "dials", npDials(dialers[impl], dest, stacks[impl], cfg, res[impl]))
		}
	}
	// Head-of-line last: a proxy that wedges must not spoil the rest.
	for r := range cfg.rounds {
		for _, impl := range order(r) {
			check(impl, "head-of-line", npHOL(dialers[impl], dest, cfg, res[impl]))
		}
	}
	elapsed := time.Since(start)
	load1 := loadAvg()
	if cfg.profileDir != "" {
		for _, impl := range cfg.impls {
			if st := stacks[impl]; st != nil {
				npProfile(b, st, dest, cfg)
			}
		}
	}
	for _, st := range stacks {
		if err := st.alive(); err != nil {
			b.Error(err)
		}
	}
	return res, npTable(mode, cfg, res, load0, load1, elapsed)
}

func stackLogs(st *npStack) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("\n--- %s ---\n%s\n--- %s ---\n%s", st.server.LogPath, st.server.LogTail(20), st.agent.LogPath, st.agent.LogTail(20))
}

var npIDs atomic.Uint64

// npTransfer sends size bytes to the sink on a new connection and waits
// for its acknowledgement, at most timeout; it returns the bytes the sink
// received and the time taken (timeout if it did not finish). before runs
// just before the clock starts. With withDial, the dial is timed too, and a
// dial that fails or does not finish in time is a transfer that is stuck
// (0 bytes), not an error.
func npTransfer(d npDialer, dest *npDest, size int64, writeSize int, timeout time.Duration, withDial bool, before func()) (int64, time.Duration, bool, error) {
	id := npIDs.Add(1)
	defer dest.progress.Delete(id)
	var hdr [16]byte
	binary.BigEndian.PutUint64(hdr[:8], uint64(size))
	binary.BigEndian.PutUint64(hdr[8:], id)
	buf := npPatternBuf(writeSize)
	// The transfer goes on in npTimeout's goroutine after a timeout: it
	// stops at its next step once abandoned, closing its connection.
	var mu sync.Mutex
	var c net.Conn
	var abandoned bool
	dial := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := d.dial(ctx, dest.sink)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		c = conn
		if abandoned {
			go func() { _ = conn.Close() }()
			return errNPTimeout
		}
		return nil
	}
	quit := func() bool { mu.Lock(); defer mu.Unlock(); return abandoned }
	if !withDial {
		if err := dial(); err != nil {
			return 0, 0, false, err
		}
	}
	if before != nil {
		before()
	}
	start := time.Now()
	dialFailed := false
	err := npTimeout(timeout, func() error {
		if withDial {
			if err := dial(); err != nil {
				mu.Lock()
				dialFailed = true
				mu.Unlock()
				return err
			}
		}
		if _, err := c.Write(hdr[:]); err != nil {
			return err
		}
		for sent := int64(0); sent < size; {
			if quit() {
				return errNPTimeout
			}
			n := min(int64(writeSize), size-sent)
			if _, err := c.Write(npPatternAt(buf, sent, n)); err != nil {
				return err
			}
			sent += n
		}
		ack := make([]byte, 1)
		_, err := io.ReadFull(c, ack)
		return err
	})
	took := time.Since(start)
	received := dest.received(id)
	mu.Lock()
	abandoned = true
	if c != nil {
		// konnectivity-client's Close waits for the server's answer.
		go func(c net.Conn) { _ = c.Close() }(c)
	}
	failed := dialFailed
	mu.Unlock()
	switch {
	case err == errNPTimeout || (withDial && failed):
		return received, took, true, nil
	case err != nil:
		return 0, took, false, err
	}
	// Acknowledged: the sink has read size bytes, unless the harness
	// broke (a figure must count only bytes that arrived as sent).
	if received != size {
		return received, took, false, fmt.Errorf("acknowledged with %d of %d bytes at the sink", received, size)
	}
	if off := dest.corruptAt(id); off >= 0 {
		return received, took, false, fmt.Errorf("the sink read other bytes than were sent, from offset %d", off)
	}
	return received, took, false, nil
}

func npBulk(d npDialer, dest *npDest, st *npStack, cfg npConfig, r *npResult) error {
	var s0, a0, s1, a1, self0, p0 float64
	self := os.Getpid()
	n, took, timedOut, err := npTransfer(d, dest, cfg.bulkBytes, cfg.writeSize, 5*time.Minute, false, func() {
		if st != nil {
			p0 = st.dataPacketsToAgent()
			s0, a0 = st.cpuSeconds()
		}
		self0 = procCPUSeconds(self)
	})
	if err != nil {
		return err
	}
	if timedOut {
		return fmt.Errorf("%d of %d bytes after %v", n, cfg.bulkBytes, took)
	}
	r.selfCPU += procCPUSeconds(self) - self0
	if st != nil {
		s1, a1 = st.cpuSeconds()
		r.serverCPU += s1 - s0
		r.agentCPU += a1 - a0
		r.proxyCPUTotal = s1 + a1
		r.bulkPackets += st.dataPacketsToAgent() - p0
	}
	r.bulkBytes += n
	r.bulkTime += took
	r.bulkRounds = append(r.bulkRounds, mbps(n, took))
	return nil
}

func npEcho(d npDialer, addr string) error {
	return npTimeout(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := d.dial(ctx, addr)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		msg := []byte("ping")
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err = io.ReadFull(c, msg)
		return err
	})
}

func npLatency(d npDialer, dest *npDest, cfg npConfig, r *npResult) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := d.dial(ctx, dest.echo)
	if err != nil {
		return err
	}
	defer func() { go func() { _ = c.Close() }() }()
	msg, sent := make([]byte, 64), make([]byte, 64)
	var seq uint64
	rtt := func() (time.Duration, error) {
		seq++
		binary.BigEndian.PutUint64(sent, seq)
		start := time.Now()
		if _, err := c.Write(sent); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			return 0, err
		}
		took := time.Since(start)
		if !bytes.Equal(msg, sent) {
			return 0, fmt.Errorf("round trip %d: echo %x, want %x", seq, msg, sent)
		}
		return took, nil
	}
	return npTimeout(5*time.Minute, func() error {
		for range min(200, cfg.rtts) { // warm-up
			if _, err := rtt(); err != nil {
				return err
			}
		}
		for range cfg.rtts {
			t, err := rtt()
			if err != nil {
				return err
			}
			r.rtts = append(r.rtts, t)
		}
		return nil
	})
}

func npDials(d npDialer, dest *npDest, st *npStack, cfg npConfig, r *npResult) error {
	var s0, a0 float64
	if st != nil {
		s0, a0 = st.cpuSeconds()
	}
	self0 := procCPUSeconds(os.Getpid())
	var count, errs, closeRaces atomic.Int64
	var firstErr atomic.Value
	seen0 := dest.echoConns.Load()
	start := time.Now()
	deadline := start.Add(cfg.dialTime)
	err := npTimeout(cfg.dialTime+2*time.Minute, func() error {
		var wg sync.WaitGroup
		for range cfg.dialers {
			wg.Go(func() {
				one := []byte{0}
				for time.Now().Before(deadline) {
					err := func() error {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						c, err := d.dial(ctx, dest.echo)
						if err != nil {
							return fmt.Errorf("dial: %w", err)
						}
						want := one[0] + 1
						one[0] = want
						if _, err := c.Write(one); err != nil {
							_ = c.Close()
							return fmt.Errorf("write: %w", err)
						}
						if _, err := io.ReadFull(c, one); err != nil {
							_ = c.Close()
							return fmt.Errorf("read: %w", err)
						}
						if one[0] != want {
							_ = c.Close()
							return fmt.Errorf("echo %d, want %d", one[0], want)
						}
						if err := c.Close(); err != nil {
							if err.Error() == "tunnel closed" {
								// The konnectivity client's race: Close
								// selects between the CLOSE_RSP it got and
								// its tunnel's end, which follows the
								// CLOSE_RSP at once; when both are ready
								// before Close waits (its thread was off the
								// CPU, common on 2 busy cores), it picks
								// at random. The byte was echoed and the
								// close answered: counted, and told apart.
								closeRaces.Add(1)
								return nil
							}
							return fmt.Errorf("close: %w", err)
						}
						return nil
					}()
					if err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					count.Add(1)
				}
			})
		}
		wg.Wait()
		return nil
	})
	took := time.Since(start)
	if err != nil {
		return err
	}
	if e := firstErr.Load(); e != nil && errs.Load() > count.Load()/100 {
		return fmt.Errorf("%d of %d dials failed, first: %v", errs.Load(), errs.Load()+count.Load(), e)
	}
	// Each counted dial had its byte echoed, so the echo server took it.
	seen := dest.echoConns.Load() - seen0
	if seen < count.Load() {
		return fmt.Errorf("%d dials counted, the echo server took %d connections", count.Load(), seen)
	}
	r.dialsSeen += seen
	r.dialSelfCPU += procCPUSeconds(os.Getpid()) - self0
	if st != nil {
		s1, a1 := st.cpuSeconds()
		r.dialCPU += (s1 - s0) + (a1 - a0)
	}
	r.dials += count.Load()
	r.dialErrs += errs.Load()
	r.closeRaces += closeRaces.Load()
	if e := firstErr.Load(); e != nil && r.firstDialErr == nil {
		r.firstDialErr, _ = e.(error)
	}
	r.dialTime += took
	return nil
}

// npHOL measures connection A alone, then while connection B, through the
// same agent, has data backed up behind a destination that does not read.
func npHOL(d npDialer, dest *npDest, cfg npConfig, r *npResult) error {
	unrecovered0 := r.holUnrecovered
	n, took, timedOut, err := npTransfer(d, dest, cfg.holBytes, cfg.writeSize, 2*time.Minute, true, nil)
	if err != nil {
		return fmt.Errorf("alone: %w", err)
	}
	if timedOut {
		return fmt.Errorf("alone: %d of %d bytes after %v", n, cfg.holBytes, took)
	}
	r.holAloneBytes += n
	r.holAloneTime += took
	aloneTook := took
	defer func() {
		// A's alone figure is the mean of before and after, against drift.
		if r.holUnrecovered == unrecovered0 {
			n, took, timedOut, err := npTransfer(d, dest, cfg.holBytes, cfg.writeSize, 2*time.Minute, true, nil)
			if err == nil && !timedOut {
				r.holAloneBytes += n
				r.holAloneTime += took
				return
			}
		}
		// Count the first figure twice: the pair stays balanced.
		r.holAloneBytes += cfg.holBytes
		r.holAloneTime += aloneTook
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cb, err := d.dial(ctx, dest.stall)
	if err != nil {
		return fmt.Errorf("stalled connection: %w", err)
	}
	// B writes until its writes block: the destination's receive buffer,
	// the agent's and the server's buffers and flow-control windows full.
	const noBackpressureLimit = 1 << 30
	var written atomic.Int64
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		buf := make([]byte, cfg.writeSize)
		for written.Load() < noBackpressureLimit {
			n, err := cb.Write(buf)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	last, stillSince := int64(-1), time.Now()
	for waitUntil := time.Now().Add(10 * time.Second); time.Now().Before(waitUntil); time.Sleep(20 * time.Millisecond) {
		if w := written.Load(); w != last {
			last, stillSince = w, time.Now()
		} else if time.Since(stillSince) > 300*time.Millisecond {
			break
		}
	}
	if w := written.Load(); w >= noBackpressureLimit {
		r.holNoBackpressure = true
	}
	r.holBacklog = max(r.holBacklog, written.Load())

	timeout := max(5*time.Second, 5*aloneTook)
	n, took, timedOut, err = npTransfer(d, dest, cfg.holBytes, cfg.writeSize, timeout, true, nil)
	if err != nil {
		return fmt.Errorf("beside the stalled connection: %w", err)
	}
	if timedOut {
		r.holTimeouts++
	}
	r.holStalledBytes += n
	r.holStalledTime += took

	// Release B; the proxy must carry on.
	dest.releaseStalled()
	go func() { _ = cb.Close() }()
	recovered := false
	for until := time.Now().Add(15 * time.Second); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		if npEcho(d, dest.echo) == nil {
			recovered = true
			break
		}
	}
	if !recovered {
		r.holUnrecovered++
	}
	return nil
}

// npProfile takes 5 s CPU profiles of a stack's server and agent under
// bulk traffic, then under dials.
func npProfile(b testing.TB, st *npStack, dest *npDest, cfg npConfig) {
	if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
		b.Error(err)
		return
	}
	const seconds = 5
	for _, phase := range []string{"bulk", "dials"} {
		var wg sync.WaitGroup
		for _, p := range []struct{ who, url string }{{"server", st.serverAdmin}, {"agent", st.agentAdmin}} {
			path := filepath.Join(cfg.profileDir, fmt.Sprintf("%s-%s-%s-%s.pprof", st.mode, st.name, phase, p.who))
			wg.Go(func() {
				if err := fetchTo(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.url, seconds), path); err != nil {
					b.Errorf("profile %s: %v", path, err)
				}
			})
		}
		stop := time.Now().Add(seconds*time.Second + 500*time.Millisecond)
		scratch := &npResult{}
		pc := cfg
		pc.dialTime = time.Until(stop)
		for time.Now().Before(stop) {
			var err error
			if phase == "bulk" {
				pc.bulkBytes = 64 << 20
				err = npBulk(st.dialer, dest, nil, pc, scratch)
			} else {
				err = npDials(st.dialer, dest, nil, pc, scratch)
			}
			if err != nil {
				b.Errorf("profile %s %s: %v", st.name, phase, err)
				break
			}
		}
		wg.Wait()
	}
	b.Logf("CPU profiles of %s %s in %s (go tool pprof -top <file>)", st.mode, st.name, cfg.profileDir)
}

func fetchTo(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// npTable is the compact table of one mode, with Portside's ratios to
// upstream against the targets (P4).
func npTable(mode string, cfg npConfig, res map[string]*npResult, load0, load1 string, elapsed time.Duration) string {
	var sb strings.Builder
	direct := res[npDirect]
	fmt.Fprintf(&sb, "network proxy, %s frontend (CPU: server + agent; \"client\": the benchmark process, clients and destination): %d round(s) of %d MiB bulk in %d KiB writes, %d RTTs, %d dialers × %v, %d MiB head-of-line; %v; load average %s → %s\n",
		mode, cfg.rounds, cfg.bulkBytes>>20, cfg.writeSize>>10, cfg.rtts, cfg.dialers, cfg.dialTime, cfg.holBytes>>20, elapsed.Round(time.Second), load0, load1)
	fmt.Fprintf(&sb, "%-13s %9s %-17s %7s %9s %10s %7s %8s %8s %9s %9s %9s %10s %10s %9s %9s %9s\n",
		"", "MB/s", "(per round)", "×direct", "CPU-s/GiB", "(client)", "KiB/pkt", "p50 µs", "p99 µs", "+p50 µs", "+p99 µs", "dials/s", "CPU-ms/dial", "(client)", "HOL slow", "backlog", "recovered")
	for _, impl := range cfg.impls {
		r := res[impl]
		rounds := make([]string, len(r.bulkRounds))
		for i, v := range r.bulkRounds {
			rounds[i] = fmt.Sprintf("%.0f", v)
		}
		cpu, cpuDial := "-", "-"
		if impl != npDirect {
			cpu = fmt.Sprintf("%.2f", r.cpuPerGiB())
			cpuDial = fmt.Sprintf("%.2f", 1e3*r.dialCPU/float64(max(1, r.dials)))
		}
		hol := fmt.Sprintf("%.1f%%", r.holSlowdown())
		if r.holTimeouts > 0 {
			hol += fmt.Sprintf(" (%d stuck)", r.holTimeouts)
		}
		backlog := fmt.Sprintf("%.1f MB", float64(r.holBacklog)/1e6)
		if r.holNoBackpressure {
			backlog = ">1 GiB!"
		}
		recovered := "yes"
		if r.holUnrecovered > 0 {
			recovered = fmt.Sprintf("no (%d)", r.holUnrecovered)
		}
		pkt := "-"
		if r.bulkPackets > 0 {
			pkt = fmt.Sprintf("%.1f", float64(r.bulkBytes)/r.bulkPackets/1024)
		}
		fmt.Fprintf(&sb, "%-13s %9.0f %-17s %7.3f %9s %10.2f %7s %8.0f %8.0f %9.0f %9.0f %9.0f %10s %10.2f %9s %9s %9s\n",
			impl, r.mbps(), "("+strings.Join(rounds, " ")+")", r.mbps()/direct.mbps(), cpu, r.selfCPU/(float64(r.bulkBytes)/(1<<30)), pkt,
			us(r.percentile(50)), us(r.percentile(99)), us(r.percentile(50))-us(direct.percentile(50)), us(r.percentile(99))-us(direct.percentile(99)),
			r.dialRate(), cpuDial, 1e3*r.dialSelfCPU/float64(max(1, r.dials)), hol, backlog, recovered)
	}
	u := res[npUpstream]
	for _, impl := range []string{npPortside, npPortsideGRPC} {
		p := res[impl]
		if u == nil || p == nil {
			continue
		}
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		thr, cpu := p.mbps()/u.mbps(), p.cpuPerGiB()/u.cpuPerGiB()
		added := func(r *npResult, q int) float64 { return us(r.percentile(q)) - us(direct.percentile(q)) }
		p50, p99 := added(p, 50)/added(u, 50), added(p, 99)/added(u, 99)
		dial := p.dialRate() / u.dialRate()
		dialCPU := (p.dialCPU / float64(max(1, p.dials))) / (u.dialCPU / float64(max(1, u.dials)))
		fmt.Fprintf(&sb, "%s vs upstream (issue 32): throughput %.2f× (≥3: %s), CPU/GiB %.2f× (≤0.3: %s), CPU/dial %.2f× (≤0.33: %s), added p50 %.2f× (≤0.5: %s), added p99 %.2f× (≤0.5: %s), dials %.2f×, stalled stream slows another %.1f%% (<10%%: %s)\n",
			impl, thr, verdict(thr >= 3), cpu, verdict(cpu <= 0.3), dialCPU, verdict(dialCPU <= 0.33), p50, verdict(p50 <= 0.5), p99, verdict(p99 <= 0.5),
			dial, p.holSlowdown(), verdict(p.holSlowdown() < 10))
	}
	return sb.String()
}

// npReport reports each contender's figures as sub-benchmarks
// (<mode>/<contender>/<measure>), and Portside's ratios to upstream
// (<mode>/portside/vs-upstream). The sub-benchmarks only report what the
// mode measured, interleaved, above.
func npReport(b *testing.B, cfg npConfig, res map[string]*npResult) {
	direct := res[npDirect]
	metric := func(b *testing.B, name string, f func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			f(b)
		})
	}
	for _, impl := range cfg.impls {
		r := res[impl]
		b.Run(impl, func(b *testing.B) {
			metric(b, "throughput", func(b *testing.B) {
				b.ReportMetric(r.mbps(), "MB/s")
				b.ReportMetric(r.mbps()/direct.mbps(), "x-direct")
				b.ReportMetric(r.selfCPU/(float64(r.bulkBytes)/(1<<30)), "client+sink-CPU-s/GiB")
				if impl != npDirect {
					b.ReportMetric(r.cpuPerGiB(), "proxy-CPU-s/GiB")
					b.ReportMetric(r.serverCPU/(float64(r.bulkBytes)/(1<<30)), "server-CPU-s/GiB")
					b.ReportMetric(r.agentCPU/(float64(r.bulkBytes)/(1<<30)), "agent-CPU-s/GiB")
					if r.bulkPackets > 0 {
						b.ReportMetric(float64(r.bulkBytes)/r.bulkPackets/1024, "KiB/DATA-packet")
					}
				}
			})
			metric(b, "latency", func(b *testing.B) {
				b.ReportMetric(us(r.percentile(50)), "p50-µs")
				b.ReportMetric(us(r.percentile(99)), "p99-µs")
				b.ReportMetric(us(r.percentile(50))-us(direct.percentile(50)), "added-p50-µs")
				b.ReportMetric(us(r.percentile(99))-us(direct.percentile(99)), "added-p99-µs")
			})
			metric(b, "dials", func(b *testing.B) {
				b.ReportMetric(r.dialRate(), "dials/s")
				b.ReportMetric(float64(r.dialErrs), "failed-dials")
				if impl != npDirect {
					b.ReportMetric(1e3*r.dialCPU/float64(max(1, r.dials)), "proxy-CPU-ms/dial")
				}
				b.ReportMetric(1e3*r.dialSelfCPU/float64(max(1, r.dials)), "client+echo-CPU-ms/dial")
			})
			metric(b, "hol", func(b *testing.B) {
				b.ReportMetric(mbps(r.holAloneBytes, r.holAloneTime), "alone-MB/s")
				b.ReportMetric(mbps(r.holStalledBytes, r.holStalledTime), "beside-stalled-MB/s")
				b.ReportMetric(r.holSlowdown(), "slowdown-%")
				b.ReportMetric(float64(r.holBacklog)/1e6, "stalled-backlog-MB")
				b.ReportMetric(float64(r.holTimeouts), "stuck-rounds")
				b.ReportMetric(float64(r.holUnrecovered), "unrecovered-rounds")
			})
			if u := res[npUpstream]; (impl == npPortside || impl == npPortsideGRPC) && u != nil {
				metric(b, "vs-upstream", func(b *testing.B) {
					b.ReportMetric(r.mbps()/u.mbps(), "throughput-x")
					b.ReportMetric(r.cpuPerGiB()/u.cpuPerGiB(), "CPU/GiB-x")
					b.ReportMetric((r.dialCPU/float64(max(1, r.dials)))/(u.dialCPU/float64(max(1, u.dials))), "CPU/dial-x")
					b.ReportMetric((us(r.percentile(50))-us(direct.percentile(50)))/(us(u.percentile(50))-us(direct.percentile(50))), "added-p50-x")
					b.ReportMetric((us(r.percentile(99))-us(direct.percentile(99)))/(us(u.percentile(99))-us(direct.percentile(99))), "added-p99-x")
					b.ReportMetric(r.dialRate()/u.dialRate(), "dials-x")
				})
			}
		})
	}
}
