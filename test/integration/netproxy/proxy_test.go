package netproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/tools"
)

// A proxyKind is an implementation of a konnectivity-compatible proxy
// server and agent. The tests run against every kind in proxyKinds.
type proxyKind string

// kindANP is upstream sigs.k8s.io/apiserver-network-proxy (proxy-server,
// proxy-agent at ANP_VERSION, built by `make tools`).
const kindANP proxyKind = "anp"

// kindPortside is Portside's own: `portside proxy-server` and `portside
// proxy-agent`, from a portside binary built once per test run.
const kindPortside proxyKind = "portside"

// proxyCombo is a server implementation with an agent implementation.
type proxyCombo struct{ server, agent proxyKind }

func (c proxyCombo) String() string {
	return "server-" + string(c.server) + "_agent-" + string(c.agent)
}

// proxyCombos are the server/agent pairs the apiserver tests run against:
// every server with every agent, so each side is proven against the other
// implementation's wire protocol too.
var proxyCombos = []proxyCombo{
	{kindPortside, kindPortside},
	{kindANP, kindPortside},
	{kindPortside, kindANP},
	{kindANP, kindANP},
}

// serverConfig is what a test needs from a proxy server. Files are PEM.
type serverConfig struct {
	// Mode is "grpc" or "http-connect": the protocol kube-apiserver speaks
	// to the server (its egress selector's proxyProtocol).
	Mode string
	// UDS is the unix socket kube-apiserver connects to; or, when empty,
	// FrontendPort on 127.0.0.1 with mTLS: FrontendCert/Key serve,
	// FrontendCA verifies kube-apiserver's client certificate.
	UDS                                   string
	FrontendPort                          int
	FrontendCert, FrontendKey, FrontendCA string
	// AgentPort on 127.0.0.1 takes agents, with mTLS: AgentCert/Key serve,
	// AgentCA verifies the agents' client certificates.
	AgentPort                    int
	AgentCert, AgentKey, AgentCA string
	// HealthPort serves /healthz, /readyz (an agent is connected) and
	// /metrics; AdminPort whatever the implementation puts there.
	HealthPort, AdminPort int
	// ServerID is --server-id ("": the implementation picks one);
	// ServerCount is --server-count (0: 1), how many servers an agent
	// should hold.
	ServerID    string
	ServerCount int
	// Extra are more flags.
	Extra []string
}

// agentConfig is what a test needs from a proxy agent.
type agentConfig struct {
	ID string
	// ServerPort on 127.0.0.1 is the server's AgentPort; CA verifies the
	// server, Cert/Key are the agent's client certificate.
	ServerPort    int
	CA, Cert, Key string
	// HealthPort serves /healthz, /readyz (connected to the server) and
	// /metrics.
	HealthPort, AdminPort int
	// Extra are more flags.
	Extra []string
}

// proxyImpl turns configurations into command lines, and reads what the
// tests check from an implementation's metrics.
type proxyImpl struct {
	serverBin, agentBin string // names in the tools directory (or paths)
	serverArgs          func(serverConfig) []string
	agentArgs           func(agentConfig) []string
	// agentDials is the agent's count of connections it dialed for
	// kube-apiserver, from its /metrics.
	agentDials func(metrics string) float64
	// noAgent is a text kube-apiserver's error carries when a GRPC server
	// has no agent to dial through ("": not checked).
	noAgent string
	// agentStopGrace is how long a stopped agent gets between SIGTERM and
	// SIGKILL.
	agentStopGrace time.Duration
}

var impls = map[proxyKind]proxyImpl{
	kindANP: {
		serverBin:  tools.ANPProxyServer,
		agentBin:   tools.ANPProxyAgent,
		serverArgs: anpServerArgs,
		agentArgs:  anpAgentArgs,
		agentDials: func(metrics string) float64 {
			return metricValue(metrics, "konnectivity_network_proxy_agent_dial_duration_seconds_count")
		},
		noAgent: "No agent available",
		// Upstream's agent ignores SIGTERM: waiting for it is time lost.
		agentStopGrace: 200 * time.Millisecond,
	},
	// Portside's proxy takes upstream's flags (a drop-in replacement), and
	// its agent exports upstream's metric names.
	kindPortside: {
		serverBin: portsideBin,
		agentBin:  portsideBin,
		serverArgs: func(c serverConfig) []string {
			return append([]string{"proxy-server"}, anpServerArgs(c)...)
		},
		agentArgs: func(c agentConfig) []string {
			return append([]string{"proxy-agent"}, anpAgentArgs(c)...)
		},
		agentDials: func(metrics string) float64 {
			return metricValue(metrics, "konnectivity_network_proxy_agent_dial_duration_seconds_count")
		},
		noAgent:        "No agent available",
		agentStopGrace: 5 * time.Second,
	},
}

// anpServerArgs is upstream proxy-server's command line for c.
func anpServerArgs(c serverConfig) []string {
	args := []string{
		"--mode=" + c.Mode,
		"--server-count=" + strconv.Itoa(max(c.ServerCount, 1)),
		"--agent-bind-address=127.0.0.1",
		"--agent-port=" + strconv.Itoa(c.AgentPort),
		"--cluster-cert=" + c.AgentCert, "--cluster-key=" + c.AgentKey, "--cluster-ca-cert=" + c.AgentCA,
		"--health-bind-address=127.0.0.1", "--health-port=" + strconv.Itoa(c.HealthPort),
		"--admin-bind-address=127.0.0.1", "--admin-port=" + strconv.Itoa(c.AdminPort),
		"--keepalive-time=30s", "--frontend-keepalive-time=30s",
		"--v=2",
	}
	if c.ServerID != "" {
		args = append(args, "--server-id="+c.ServerID)
	}
	args = append(args, c.Extra...)
	if c.UDS != "" {
		return append(args, "--uds-name="+c.UDS, "--server-port=0", "--delete-existing-uds-file=true")
	}
	return append(args,
		"--server-bind-address=127.0.0.1", "--server-port="+strconv.Itoa(c.FrontendPort),
		"--server-cert="+c.FrontendCert, "--server-key="+c.FrontendKey, "--server-ca-cert="+c.FrontendCA)
}

// anpAgentArgs is upstream proxy-agent's command line for c; without
// Cert and Key the agent presents no client certificate.
func anpAgentArgs(c agentConfig) []string {
	args := []string{
		"--agent-id=" + c.ID,
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=" + strconv.Itoa(c.ServerPort),
		"--ca-cert=" + c.CA,
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(c.HealthPort),
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(c.AdminPort),
		"--sync-interval=200ms", "--probe-interval=200ms", "--sync-interval-cap=2s",
		"--v=2",
	}
	if c.Cert != "" || c.Key != "" {
		args = append(args, "--agent-cert="+c.Cert, "--agent-key="+c.Key)
	}
	return append(args, c.Extra...)
}

// proxyProc is a running proxy server or agent.
type proxyProc struct {
	*proc.Process
	// health is http://127.0.0.1:<health port>.
	health string
	// grace is the time stop gives between SIGTERM and SIGKILL.
	grace time.Duration
}

// stop stops p (SIGTERM, then SIGKILL after its grace time) and waits.
func (p *proxyProc) stop() { p.Stop(p.grace) }

// metrics returns the process's /metrics text.
func (p *proxyProc) metrics(t *testing.T) string {
	t.Helper()
	body, _, err := httpGet(p.health + "/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", p.Name, err)
	}
	return body
}

// startProxyServer starts a kind's proxy server and waits for its /healthz;
// it is stopped, by PID, when the test ends.
func startProxyServer(t *testing.T, kind proxyKind, dir string, cfg serverConfig) *proxyProc {
	t.Helper()
	pp, err := tryStartProxyServer(t, kind, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pp
}

func tryStartProxyServer(t *testing.T, kind proxyKind, dir string, cfg serverConfig) (*proxyProc, error) {
	t.Helper()
	impl := implOf(t, kind)
	log := string(kind) + "-proxy-server.log"
	if cfg.ServerID != "" {
		log = string(kind) + "-proxy-server-" + cfg.ServerID + ".log"
	}
	return tryStartProc(t, "proxy-server", impl.serverBin, impl.serverArgs(cfg), filepath.Join(dir, log), cfg.HealthPort, 5*time.Second)
}

// startProxyServerOnFreePorts starts a proxy server on agent, health and
// admin ports picked free, picking again (up to three times) when one was
// taken before the server bound it.
func startProxyServerOnFreePorts(t *testing.T, kind proxyKind, dir string, cfg *serverConfig) *proxyProc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 3)
		cfg.AgentPort, cfg.HealthPort, cfg.AdminPort = ports[0], ports[1], ports[2]
		pp, err := tryStartProxyServer(t, kind, dir, *cfg)
		if err == nil {
			return pp
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; picking other ports", attempt, errPortTaken)
	}
}

// startProxyAgent starts a kind's proxy agent and waits for its /healthz;
// it is stopped, by PID, when the test ends (or earlier with Stop).
func startProxyAgent(t *testing.T, kind proxyKind, dir string, cfg agentConfig) *proxyProc {
	t.Helper()
	impl := implOf(t, kind)
	return startProc(t, "proxy-agent", impl.agentBin, impl.agentArgs(cfg), filepath.Join(dir, string(kind)+"-proxy-agent-"+cfg.ID+".log"), cfg.HealthPort, impl.agentStopGrace)
}

func implOf(t *testing.T, kind proxyKind) proxyImpl {
	t.Helper()
	impl, ok := impls[kind]
	if !ok {
		t.Fatalf("no proxy implementation %q", kind)
	}
	return impl
}

func startProc(t *testing.T, name, bin string, args []string, logPath string, healthPort int, grace time.Duration) *proxyProc {
	t.Helper()
	pp, err := tryStartProc(t, name, bin, args, logPath, healthPort, grace)
	if err != nil {
		t.Fatal(err)
	}
	return pp
}

// errPortTaken: a port picked free a moment ago was taken before the
// process bound it (another package's test picked it too); pick again.
var errPortTaken = errors.New("a port was taken meanwhile")

// tryStartProc is startProc returning its start-up failure; one caused by a
// port taken meanwhile wraps errPortTaken.
func tryStartProc(t *testing.T, name, bin string, args []string, logPath string, healthPort int, grace time.Duration) (*proxyProc, error) {
	t.Helper()
	path := bin
	if bin == portsideBin {
		path = portsideBinary(t)
	} else if !filepath.IsAbs(bin) {
		dir, err := tools.BinDir()
		if err != nil {
			t.Fatal(err)
		}
		if path, err = tools.Path(dir, bin); err != nil {
			t.Fatal(err)
		}
	}
	// The marker lets a test find, in /proc, every process it started
	// (assertNoProcessesUsing), whatever their command lines.
	p, err := proc.Start(name, path, args, []string{procMarkerEnv + "=" + filepath.Dir(logPath)}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	pp := &proxyProc{Process: p, health: "http://127.0.0.1:" + strconv.Itoa(healthPort), grace: grace}
	t.Cleanup(func() {
		pp.stop()
		if t.Failed() {
			t.Logf("--- last lines of %s ---\n%s", p.LogPath, p.LogTail(30))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, code, err := httpGet(pp.health + "/healthz"); err == nil && code == http.StatusOK {
			t.Logf("%s ready (pid %d, log %s)", name, p.PID(), logPath)
			return pp, nil
		}
		select {
		case <-p.Done():
			tail := p.LogTail(30)
			if strings.Contains(tail, "address already in use") {
				return nil, fmt.Errorf("%s exited during start-up: %w:\n%s", name, errPortTaken, tail)
			}
			return nil, fmt.Errorf("%s exited during start-up (%v):\n%s", name, p.ExitErr(), tail)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not healthy after 30s:\n%s", name, p.LogTail(30))
		}
	}
}

// waitReady polls p's /readyz until it answers 200 (for a server: an agent
// is connected; for an agent: it is connected to the server).
func (p *proxyProc) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		body, code, err := httpGet(p.health + "/readyz")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v: %d %q %v", p.Name, timeout, code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpGet(url string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), resp.StatusCode, sc.Err()
}

// assertProtocol waits until a Portside server has its one agent on the
// protocol the combination is named after: portside-link/2 (chosen by
// ALPN on the mTLS agent port) with a Portside agent, upstream's gRPC
// protocol with upstream's. All carry bytes correctly, so a Portside pair
// that fell back to another protocol would otherwise pass unnoticed.
// (Upstream's server has no such metric, and speaks only upstream's
// protocol.)
func assertProtocol(t *testing.T, combo proxyCombo, server *proxyProc) {
	t.Helper()
	if combo.server != kindPortside {
		return
	}
	want := 0.0
	if combo.agent == kindPortside {
		want = 1
	}
	waitMetric(t, server, "konnectivity_network_proxy_server_portside_link_backends", want, 10*time.Second)
	waitMetric(t, server, "konnectivity_network_proxy_server_portside_streams_v1_backends", 0, 10*time.Second)
}

// metricValue sums the samples of a metric (all label sets) in Prometheus
// text format.
func metricValue(text, name string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// freePorts returns n distinct ports free on 127.0.0.1 a moment ago, between
// 20000 and 32767: below the kernel's ephemeral range (so no outgoing
// connection takes them meanwhile) and accepted by ANP, which refuses ports
// above 49151.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 1000 {
			t.Fatal("no free ports between 20000 and 32767")
		}
		port := 20000 + rand.IntN(12768)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports
}

// shortTempDir is a temporary directory with a short path, for unix sockets
// (at most 108 bytes), removed when the test ends unless it failed or
// NETPROXY_KEEP_LOGS is set.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pxy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after the cleanups of everything started in dir.
		assertNoProcessesUsing(t, dir)
		if t.Failed() {
			t.Logf("keeping %s (logs) because the test failed", dir)
			return
		}
		if os.Getenv("NETPROXY_KEEP_LOGS") != "" {
			t.Logf("keeping %s (logs): NETPROXY_KEEP_LOGS is set", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}
