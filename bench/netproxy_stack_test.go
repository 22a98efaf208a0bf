package bench

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testskip"
	"github.com/portside-io/portside/internal/tools"
)

// This file holds BenchmarkNetworkProxy's machinery: the proxy server and
// agent processes (upstream ANP's and Portside's, started with the same
// upstream flags), their certificates, the destination servers in the
// benchmark process, and the clients, which connect exactly as
// kube-apiserver's egress selector does.

// Frontend modes: kube-apiserver's egress selector proxyProtocol.
const (
	npModeGRPC        = "grpc"         // gRPC over a unix socket, a single-use tunnel per dial
	npModeHTTPConnect = "http-connect" // HTTP CONNECT over TCP with mTLS, a TLS connection per dial
	// npModeHTTPConnectUDS is HTTP CONNECT over a unix socket, in plaintext
	// (kube-apiserver's udsHTTPConnectConnector); not in the default run.
	npModeHTTPConnectUDS = "http-connect-uds"
)

// Contenders.
const (
	npDirect   = "direct" // no proxy: the client dials the destination
	npUpstream = "upstream"
	npPortside = "portside"
	// npPortsideGRPC is Portside with --portside-link=false on both
	// sides (gRPC with streams-v1, the protocol before portside-link/2),
	// for comparison; only when PORTSIDE_BENCH_NETPROXY_IMPLS names it.
	npPortsideGRPC = "portside-grpc"
)

// npPKI is a throw-away CA and the PEM files the processes load.
type npPKI struct {
	dir                   string
	caFile                string
	serverCert, serverKey string      // 127.0.0.1 / localhost, for the frontend and the agent port
	agentCert, agentKey   string      // the agents' client certificate
	clientTLS             *tls.Config // kube-apiserver's, for the HTTP CONNECT frontend
	caKey                 *ecdsa.PrivateKey
	ca                    *x509.Certificate
	pool                  *x509.CertPool
	serial                int64
}

func newNPPKI(b testing.TB, dir string) *npPKI {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "netproxy-bench-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &npPKI{dir: dir, caKey: key, ca: ca, pool: x509.NewCertPool(), serial: 1}
	p.pool.AddCert(ca)
	p.caFile = filepath.Join(dir, "ca.crt")
	writePEM(b, p.caFile, "CERTIFICATE", der)
	p.serverCert, p.serverKey, _ = p.issue(b, "proxy-server", true)
	p.agentCert, p.agentKey, _ = p.issue(b, "proxy-agent", false)
	_, _, apiserver := p.issue(b, "kube-apiserver", false)
	p.clientTLS = &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{apiserver}, MinVersion: tls.VersionTLS12}
	return p
}

// issue signs a certificate and writes it and its key; it returns the
// files and the certificate.
func (p *npPKI) issue(b testing.TB, cn string, server bool) (certFile, keyFile string, cert tls.Certificate) {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		b.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.dir, cn+".crt"), filepath.Join(p.dir, cn+".key")
	writePEM(b, certFile, "CERTIFICATE", der)
	writePEM(b, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(b testing.TB, path, typ string, der []byte) {
	b.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		b.Fatal(err)
	}
}

// npStack is one proxy server and one agent connected to it.
type npStack struct {
	name, mode                string
	server, agent             *proc.Process
	serverAdmin, agentAdmin   string // http://127.0.0.1:<admin port>, for /debug/pprof
	serverHealth, agentHealth string // http://127.0.0.1:<health port>
	dialer                    npDialer
}

// cpuSeconds is the server's and the agent's utime+stime so far.
func (s *npStack) cpuSeconds() (server, agent float64) {
	return procCPUSeconds(s.server.PID()), procCPUSeconds(s.agent.PID())
}

// dataPacketsToAgent is the server's count of DATA packets sent to agents
// (konnectivity_network_proxy_server_stream_packets_total, which both
// implementations export), or 0.
func (s *npStack) dataPacketsToAgent() float64 {
	return s.sumMetric(func(line string) bool {
		return strings.HasPrefix(line, "konnectivity_network_proxy_server_stream_packets_total{") &&
			strings.Contains(line, `packet_type="DATA"`) && strings.Contains(line, `segment="to_agent"`)
	})
}

// serverMetric is the server's sample of an unlabelled metric, or 0.
func (s *npStack) serverMetric(name string) float64 {
	return s.sumMetric(func(line string) bool { return strings.HasPrefix(line, name+" ") })
}

// sumMetric sums the server's samples on the lines match takes (0 when
// the server does not answer).
func (s *npStack) sumMetric(match func(line string) bool) float64 {
	resp, err := http.Get(s.serverHealth + "/metrics")
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !match(line) {
			continue
		}
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:])
		if len(f) > 0 {
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// alive reports an error if a process exited.
func (s *npStack) alive() error {
	for _, p := range []*proc.Process{s.server, s.agent} {
		select {
		case <-p.Done():
			return fmt.Errorf("%s %s exited (%v):\n%s", s.name, p.Name, p.ExitErr(), p.LogTail(20))
		default:
		}
	}
	return nil
}

// startNPStack starts a server and an agent of one implementation with
// upstream's flags (Portside's binary takes the same ones), mTLS between
// them, and waits until the server has the agent.
func startNPStack(b testing.TB, impl, mode, dir string, bins npBins, pki *npPKI) *npStack {
	b.Helper()
	ports := npFreePorts(b, 6)
	agentPort, sHealth, sAdmin, frontPort, aHealth, aAdmin := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	serverArgs := []string{
		"--mode=" + mode,
		"--server-count=1",
		"--agent-bind-address=127.0.0.1", "--agent-port=" + strconv.Itoa(agentPort),
		"--cluster-cert=" + pki.serverCert, "--cluster-key=" + pki.serverKey, "--cluster-ca-cert=" + pki.caFile,
		"--health-bind-address=127.0.0.1", "--health-port=" + strconv.Itoa(sHealth),
		"--admin-bind-address=127.0.0.1", "--admin-port=" + strconv.Itoa(sAdmin),
		"--enable-profiling",
	}
	st := &npStack{name: impl, mode: mode}
	switch mode {
	case npModeGRPC:
		uds := filepath.Join(dir, impl+".sock")
		serverArgs = append(serverArgs, "--uds-name="+uds, "--server-port=0", "--delete-existing-uds-file=true")
		st.dialer = grpcDialer{uds: uds}
	case npModeHTTPConnectUDS:
		uds := filepath.Join(dir, impl+".sock")
		serverArgs[0] = "--mode=" + npModeHTTPConnect
		serverArgs = append(serverArgs, "--uds-name="+uds, "--server-port=0", "--delete-existing-uds-file=true")
		st.dialer = connectDialer{addr: uds}
	case npModeHTTPConnect:
		addr := "127.0.0.1:" + strconv.Itoa(frontPort)
		serverArgs = append(serverArgs, "--server-bind-address=127.0.0.1", "--server-port="+strconv.Itoa(frontPort),
			"--server-cert="+pki.serverCert, "--server-key="+pki.serverKey, "--server-ca-cert="+pki.caFile)
		cfg := pki.clientTLS.Clone()
		cfg.ServerName = "127.0.0.1"
		st.dialer = connectDialer{addr: addr, tls: cfg}
	default:
		b.Fatalf("unknown mode %q", mode)
	}
	agentArgs := []string{
		"--agent-id=bench-agent",
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=" + strconv.Itoa(agentPort),
		"--ca-cert=" + pki.caFile, "--agent-cert=" + pki.agentCert, "--agent-key=" + pki.agentKey,
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(aHealth),
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(aAdmin),
		"--enable-profiling",
	}
	serverBin, agentBin := bins.anpServer, bins.anpAgent
	if impl == npPortside || impl == npPortsideGRPC {
		serverBin, agentBin = bins.portside, bins.portside
		serverArgs = append([]string{"proxy-server"}, serverArgs...)
		agentArgs = append([]string{"proxy-agent"}, agentArgs...)
		if impl == npPortsideGRPC {
			serverArgs = append(serverArgs, "--portside-link=false")
			agentArgs = append(agentArgs, "--portside-link=false")
		}
	}
	st.serverHealth = "http://127.0.0.1:" + strconv.Itoa(sHealth)
	st.agentHealth = "http://127.0.0.1:" + strconv.Itoa(aHealth)
	st.serverAdmin = "http://127.0.0.1:" + strconv.Itoa(sAdmin)
	st.agentAdmin = "http://127.0.0.1:" + strconv.Itoa(aAdmin)
	st.server = npStart(b, impl+" proxy-server", serverBin, serverArgs, filepath.Join(dir, impl+"-server.log"))
	npWaitHTTP(b, st.server, st.serverHealth+"/healthz")
	st.agent = npStart(b, impl+" proxy-agent", agentBin, agentArgs, filepath.Join(dir, impl+"-agent.log"))
	npWaitHTTP(b, st.agent, st.agentHealth+"/readyz")
	npWaitHTTP(b, st.server, st.serverHealth+"/readyz")
	if impl == npPortside || impl == npPortsideGRPC {
		// The contender is the protocol it is named after: a pair that
		// fell back to another would be measured under its name.
		metric, what := "konnectivity_network_proxy_server_portside_link_backends", "portside-link/2"
		if impl == npPortsideGRPC {
			metric, what = "konnectivity_network_proxy_server_portside_streams_v1_backends", "streams-v1"
		}
		deadline := time.Now().Add(10 * time.Second)
		for st.serverMetric(metric) != 1 {
			if time.Now().After(deadline) {
				b.Fatalf("%s's agent did not connect with %s to its server:\n%s", impl, what, st.agent.LogTail(20))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return st
}

func npStart(b testing.TB, name, bin string, args []string, logPath string) *proc.Process {
	b.Helper()
	p, err := proc.Start(name, bin, args, nil, logPath)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

// npWaitHTTP polls url until it answers 200, failing if p exits.
func npWaitHTTP(b testing.TB, p *proc.Process, url string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.Done():
			b.Fatalf("%s exited during start-up (%v):\n%s", p.Name, p.ExitErr(), p.LogTail(30))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %s not 200 after 30s:\n%s", p.Name, url, p.LogTail(30))
		}
	}
}

// npFreePorts returns n distinct ports free on 127.0.0.1 a moment ago,
// between 20000 and 32767: below the ephemeral range, and accepted by ANP
// (it refuses ports above 49151).
func npFreePorts(b testing.TB, n int) []int {
	b.Helper()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 1000 {
			b.Fatal("no free ports between 20000 and 32767")
		}
		port := 20000 + mrand.IntN(12768)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports
}

// npBins are the binaries under test.
type npBins struct{ anpServer, anpAgent, portside string }

// npBinaries finds upstream's binaries (without them: a skip, a failure
// under CI) and builds Portside's (or takes $PORTSIDE_BENCH_PORTSIDE_BIN).
func npBinaries(b testing.TB, wantPortside bool) npBins {
	b.Helper()
	dir, err := tools.BinDir()
	if err != nil {
		testskip.Unavailable(b, "network proxy benchmark needs upstream ANP's binaries: %v (run `make tools`)", err)
	}
	var bins npBins
	if bins.anpServer, err = tools.Path(dir, tools.ANPProxyServer); err != nil {
		testskip.Unavailable(b, "network proxy benchmark needs upstream ANP's proxy-server: %v (run `make tools`)", err)
	}
	if bins.anpAgent, err = tools.Path(dir, tools.ANPProxyAgent); err != nil {
		testskip.Unavailable(b, "network proxy benchmark needs upstream ANP's proxy-agent: %v (run `make tools`)", err)
	}
	if wantPortside {
		if bins.portside, err = npPortsideBinary(b); err != nil {
			b.Fatal(err)
		}
	}
	return bins
}

// npPortsideBinary builds cmd/portside into a temporary directory removed
// when b ends.
func npPortsideBinary(b testing.TB) (string, error) {
	if p := os.Getenv("PORTSIDE_BENCH_PORTSIDE_BIN"); p != "" {
		return p, nil
	}
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "portside-npbench-")
	if err != nil {
		return "", err
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	out := filepath.Join(dir, "portside")
	goBin := "go"
	if g := os.Getenv("GO"); g != "" {
		goBin = g
	}
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/portside")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/portside: %v\n%s", err, msg)
	}
	return out, nil
}

// procCPUSeconds is a process's utime+stime (all threads), in seconds.
func procCPUSeconds(pid int) float64 { return proc.CPUSeconds(pid) }

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// npDialer opens a connection to a destination, through a proxy or not.
type npDialer interface {
	dial(ctx context.Context, addr string) (net.Conn, error)
}

type directDialer struct{}

func (directDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// grpcDialer creates a single-use tunnel per dial over the unix socket,
// with kube-apiserver's options (k8s.io/apiserver egressselector
// udsGRPCConnector).
type grpcDialer struct{ uds string }

func (g grpcDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	uds := g.uds
	dialOption := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", uds)
	})
	opts := []grpc.DialOption{dialOption, grpc.WithTransportCredentials(insecure.NewCredentials())}
	//lint:ignore SA1019 kube-apiserver's egress selector dials with these (deprecated) options
	opts = append(opts, grpc.WithBlock(), grpc.WithReturnConnectionError(), grpc.WithTimeout(30*time.Second))
	tunnel, err := client.CreateSingleUseGrpcTunnel(context.TODO(), uds, opts...)
	if err != nil {
		return nil, err
	}
	c, err := tunnel.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// connectDialer opens a TLS connection (or, without tls, a unix socket
// connection) per dial and sends CONNECT, as kube-apiserver's
// tcpHTTPConnectConnector (udsHTTPConnectConnector) and tunnelHTTPConnect do.
type connectDialer struct {
	addr string
	tls  *tls.Config
}

func (h connectDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	if h.tls != nil {
		d := tls.Dialer{Config: h.tls}
		c, err = d.DialContext(ctx, "tcp", h.addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", h.addr)
	}
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, "127.0.0.1"); err != nil {
		_ = c.Close()
		return nil, err
	}
	br := bufio.NewReader(io.LimitReader(c, http.DefaultMaxHeaderBytes))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading CONNECT response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		_ = c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", addr, res.Status)
	}
	if br.Buffered() > 0 {
		_ = c.Close()
		return nil, fmt.Errorf("unexpected %d bytes after the CONNECT response", br.Buffered())
	}
	return c, nil
}

// npDest is the destination servers in the benchmark process, on
// loopback: an echo server, a sink (16-byte header: length and id; it
// reads length bytes, counting them per id, then answers one byte) and a
// staller, which accepts and never reads.
type npDest struct {
	echo, sink, stall string

	verify    bool         // the sink checks content (npPatternAt)
	progress  sync.Map     // id -> *npProgress
	echoConns atomic.Int64 // connections the echo server took

	mu      sync.Mutex
	stalled []net.Conn
	release chan struct{} // closed by releaseStalled
	conns   map[net.Conn]struct{}
}

func startNPDest(b testing.TB, verify bool) *npDest {
	b.Helper()
	d := &npDest{verify: verify, conns: map[net.Conn]struct{}{}, release: make(chan struct{})}
	d.echo = d.listen(b, func(c net.Conn) { d.echoConns.Add(1); _, _ = io.Copy(c, c) })
	d.sink = d.listen(b, d.serveSink)
	d.stall = d.listen(b, func(c net.Conn) {
		d.mu.Lock()
		d.stalled = append(d.stalled, c)
		release := d.release
		d.mu.Unlock()
		// Not reading; the connection is held until releaseStalled.
		<-release
	})
	b.Cleanup(d.releaseStalled)
	return d
}

func (d *npDest) listen(b testing.TB, handle func(net.Conn)) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = l.Close()
		d.mu.Lock()
		for c := range d.conns {
			_ = c.Close()
		}
		d.mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			d.conns[c] = struct{}{}
			d.mu.Unlock()
			go func() {
				defer func() {
					d.mu.Lock()
					delete(d.conns, c)
					d.mu.Unlock()
					_ = c.Close()
				}()
				handle(c)
			}()
		}
	}()
	return l.Addr().String()
}

func (d *npDest) serveSink(c net.Conn) {
	var hdr [16]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	size, id := int64(binary.BigEndian.Uint64(hdr[:8])), binary.BigEndian.Uint64(hdr[8:])
	v, _ := d.progress.LoadOrStore(id, &npProgress{})
	p := v.(*npProgress)
	buf := make([]byte, 256<<10)
	for off := int64(0); off < size; {
		k, err := c.Read(buf[:min(int64(len(buf)), size-off)])
		if d.verify && k > 0 && p.bad.Load() == 0 {
			for i, x := range buf[:k] {
				if x != npPatternByte(off+int64(i)) {
					p.bad.Store(off + int64(i) + 1)
					break
				}
			}
		}
		off += int64(k)
		p.n.Store(off)
		if err != nil {
			return
		}
	}
	_, _ = c.Write([]byte{1})
}

// npProgress is what the sink has read of one transfer.
type npProgress struct {
	n   atomic.Int64 // bytes
	bad atomic.Int64 // 1 + the offset of the first byte not as sent (verify), or 0
}

// received is what the sink has read for id so far.
func (d *npDest) received(id uint64) int64 {
	if v, ok := d.progress.Load(id); ok {
		return v.(*npProgress).n.Load()
	}
	return 0
}

// corruptAt is the offset of the first byte of transfer id the sink read
// other than it was sent, or -1 (always -1 without verify).
func (d *npDest) corruptAt(id uint64) int64 {
	if v, ok := d.progress.Load(id); ok {
		return v.(*npProgress).bad.Load() - 1
	}
	return -1
}

// Transfers send npPatternByte(offset) at each offset: a period prime to
// every write size, so that lost, repeated or reordered writes show.
const npPatternPeriod = 251

func npPatternByte(off int64) byte { return byte(off % npPatternPeriod) }

// npPatternBuf is a buffer from which npPatternAt cuts writes of up to
// writeSize bytes.
func npPatternBuf(writeSize int) []byte {
	b := make([]byte, writeSize+npPatternPeriod)
	for i := range b {
		b[i] = npPatternByte(int64(i))
	}
	return b
}

// npPatternAt is the n bytes of the pattern at offset off, from buf.
func npPatternAt(buf []byte, off, n int64) []byte {
	start := off % npPatternPeriod
	return buf[start : start+n]
}

// releaseStalled closes the staller's connections.
func (d *npDest) releaseStalled() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.stalled {
		_ = c.Close()
	}
	d.stalled = nil
	close(d.release)
	d.release = make(chan struct{})
}

var errNPTimeout = errors.New("timed out")

// npTimeout runs f, giving up on it after d (the proxies' connections
// have no deadlines: a hung transfer must not hang the benchmark).
func npTimeout(d time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return errNPTimeout
	}
}
