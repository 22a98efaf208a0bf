package bench

import (
	"context"
	"fmt"
	"github.com/portside-io/portside/internal/proc"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkNetworkProxyPhases finds where each proxy's CPU goes: one phase
// at a time (bulk bytes, dials, 64-byte round trips) for a fixed window,
// with the work done in that window counted, so the proxies' CPU (their
// /proc times) and, with PORTSIDE_BENCH_NETPROXY_PHASES_PROFILE=<dir>,
// their CPU profiles over the same window (pprof's fractions) convert to
// CPU per GiB, per dial and per round trip. BenchmarkNetworkProxy's
// profiles are of mixed work; these are not. Same stacks as
// BenchmarkNetworkProxy (upstream ANP and Portside, both frontends, mTLS
// between server and agent).
//
//	PORTSIDE_BENCH_NETPROXY_PHASES_SECONDS=10 (per phase)
//	PORTSIDE_BENCH_NETPROXY_PHASES_PROFILE=/tmp/np-prof
//	go test -short -run '^$' -bench NetworkProxyPhases ./bench/
//
// Each line: the work, the server's, the agent's and the client's CPU per
// unit, and the load average (the figures are only as good as the
// machine is quiet). docs/benchmarks.md has a study made with it.
func BenchmarkNetworkProxyPhases(b *testing.B) {
	secs := envInt("PORTSIDE_BENCH_NETPROXY_PHASES_SECONDS", 10)
	prof := os.Getenv("PORTSIDE_BENCH_NETPROXY_PHASES_PROFILE")
	bins := npBinaries(b, true)
	for _, mode := range []string{npModeGRPC, npModeHTTPConnect} {
		for _, impl := range []string{npUpstream, npPortside} {
			b.Run(mode+"/"+impl, func(b *testing.B) {
				for _, r := range runNPPhases(b, mode, impl, bins, time.Duration(secs)*time.Second, prof) {
					b.Log(r)
					b.ReportMetric(r.proxyPerOp(), r.phase+"-proxy-"+r.perUnit())
				}
			})
		}
	}
}

// TestNetworkProxyPhasesSmoke runs the phases briefly against both
// implementations and checks that each counted work and measured the
// proxies' CPU over it.
func TestNetworkProxyPhasesSmoke(t *testing.T) {
	bins := npBinaries(t, true)
	for _, impl := range []string{npUpstream, npPortside} {
		for _, r := range runNPPhases(t, npModeGRPC, impl, bins, 700*time.Millisecond, "") {
			t.Log(r)
			if r.work <= 0 || r.elapsed <= 0 {
				t.Errorf("%s %s: no work counted: %+v", impl, r.phase, r)
			}
			if r.serverCPU < 0 || r.agentCPU < 0 {
				t.Errorf("%s %s: CPU went backwards: %+v", impl, r.phase, r)
			}
		}
	}
}

type npPhase struct {
	mode, impl, phase string
	work              int64 // bytes, dials or round trips
	elapsed           time.Duration
	serverCPU         float64 // seconds over the phase
	agentCPU          float64
	clientCPU         float64 // this process: client library, echo and sink
	// serverSys and agentSys count read- and write-like system calls over
	// the phase (/proc/<pid>/io syscr + syscw): each is a kernel entry
	// and, on a socket, often a wake-up of the peer.
	serverSys, agentSys int64
	// kernelCPU is the server's and agent's CPU in the kernel (stime),
	// part of serverCPU + agentCPU: the floor user-space work cannot move.
	kernelCPU float64
	load      string
}

func (p npPhase) perUnit() string {
	if p.phase == "bulk" {
		return "CPU-s/GiB"
	}
	return "CPU-ms/op"
}

func (p npPhase) per(cpu float64) float64 {
	if p.work == 0 {
		return 0
	}
	if p.phase == "bulk" {
		return cpu / (float64(p.work) / (1 << 30))
	}
	return 1e3 * cpu / float64(p.work)
}

func (p npPhase) proxyPerOp() float64 { return p.per(p.serverCPU + p.agentCPU) }

func (p npPhase) String() string {
	rate := fmt.Sprintf("%.0f %s/s", float64(p.work)/p.elapsed.Seconds(), p.phase)
	if p.phase == "bulk" {
		rate = fmt.Sprintf("%.0f MB/s", float64(p.work)/p.elapsed.Seconds()/1e6)
	}
	sys := fmt.Sprintf("; in the kernel %.3f", p.per(p.kernelCPU))
	if p.work > 0 && p.phase != "bulk" {
		sys += fmt.Sprintf("; read/write calls per op server %.1f agent %.1f",
			float64(p.serverSys)/float64(p.work), float64(p.agentSys)/float64(p.work))
	}
	return fmt.Sprintf("%s %s %s: %s; %s server %.3f agent %.3f proxy %.3f client %.3f%s (load %s)",
		p.mode, p.impl, p.phase, rate, p.perUnit(), p.per(p.serverCPU), p.per(p.agentCPU), p.proxyPerOp(), p.per(p.clientCPU), sys, p.load)
}

// runNPPhases starts one stack and runs the phases on it, each for window.
func runNPPhases(b testing.TB, mode, impl string, bins npBins, window time.Duration, profDir string) []npPhase {
	dir := b.TempDir()
	pki := newNPPKI(b, dir)
	dest := startNPDest(b, false)
	st := startNPStack(b, impl, mode, dir, bins, pki)
	if err := npEcho(st.dialer, dest.echo); err != nil {
		b.Fatal(err)
	}
	var out []npPhase
	for _, phase := range []string{"bulk", "dials", "rtt"} {
		out = append(out, runNPPhase(b, st, dest, mode, impl, phase, window, profDir))
	}
	return out
}

func runNPPhase(b testing.TB, st *npStack, dest *npDest, mode, impl, phase string, window time.Duration, profDir string) npPhase {
	var wg sync.WaitGroup
	if profDir != "" {
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			b.Fatal(err)
		}
		for who, admin := range map[string]string{"server": st.serverAdmin, "agent": st.agentAdmin} {
			path := filepath.Join(profDir, fmt.Sprintf("%s-%s-%s-%s.pprof", mode, impl, phase, who))
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, max(1, int(window.Seconds())))
			wg.Go(func() {
				if err := fetchTo(url, path); err != nil {
					b.Errorf("profile %s: %v", path, err)
				}
			})
		}
		time.Sleep(100 * time.Millisecond) // the profiles start
	}
	p := npPhase{mode: mode, impl: impl, phase: phase, load: loadAvg()}
	s0, a0 := st.cpuSeconds()
	ss0, as0 := procSyscalls(st.server.PID()), procSyscalls(st.agent.PID())
	k0 := kernelSeconds(st.server.PID()) + kernelSeconds(st.agent.PID())
	c0 := procCPUSeconds(os.Getpid())
	start := time.Now()
	stop := start.Add(window)
	switch phase {
	case "bulk":
		for p.work == 0 || time.Now().Before(stop) {
			n, _, _, err := npTransfer(st.dialer, dest, 32<<20, 32<<10, time.Minute, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			p.work += n
		}
	case "dials":
		r := &npResult{}
		if err := npDials(st.dialer, dest, nil, npConfig{dialers: 8, dialTime: window}, r); err != nil {
			b.Fatal(err)
		}
		if r.dialErrs != 0 {
			b.Errorf("%s %s: %d dials failed, the first: %v", mode, impl, r.dialErrs, r.firstDialErr)
		}
		p.work = r.dials
		if r.closeRaces > 0 {
			b.Logf("%s %s: %d of %d closes met the konnectivity client's race (counted)", mode, impl, r.closeRaces, r.dials)
		}
	case "rtt":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := st.dialer.dial(ctx, dest.echo)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		msg, back := []byte(strings.Repeat("r", 64)), make([]byte, 64)
		for p.work == 0 || time.Now().Before(stop) {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, back); err != nil {
				b.Fatal(err)
			}
			if string(back) != string(msg) {
				b.Fatalf("%s %s: round trip echoed %q", mode, impl, back)
			}
			p.work++
		}
		_ = c.Close()
	}
	p.elapsed = time.Since(start)
	s1, a1 := st.cpuSeconds()
	p.serverCPU, p.agentCPU, p.clientCPU = s1-s0, a1-a0, procCPUSeconds(os.Getpid())-c0
	p.serverSys, p.agentSys = procSyscalls(st.server.PID())-ss0, procSyscalls(st.agent.PID())-as0
	p.kernelCPU = kernelSeconds(st.server.PID()) + kernelSeconds(st.agent.PID()) - k0
	wg.Wait()
	return p
}

func kernelSeconds(pid int) float64 {
	_, system := proc.CPUTimes(pid)
	return system
}

// procSyscalls is a process's read- and write-like system calls so far
// (/proc/<pid>/io), or 0.
func procSyscalls(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "syscr" || k == "syscw") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}
