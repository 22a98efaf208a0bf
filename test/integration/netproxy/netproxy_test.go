// Package netproxy proves kube-apiserver's egress through a
// konnectivity-compatible network proxy on real components: kube-apiserver
// with --egress-selector-config-file ("cluster" egress) → proxy server →
// proxy agent → simulated kubelets serving HTTPS on their node IPs. The
// proxy is upstream apiserver-network-proxy (built by `make tools`); the
// tests take the server and agent through startProxyServer/startProxyAgent
// so Portside's own runs the same tests, with every server/agent pairing
// (proxyCombos).
//
// Each test has a control plane of its own (an egress selector is a
// kube-apiserver flag), started with testenv.StartControlPlane.
package netproxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
)

// TestGRPCOverUDS: kube-apiserver → (GRPC, unix socket) → proxy server →
// (mTLS) → agent → kubelet, for node proxy and container logs.
func TestGRPCOverUDS(t *testing.T) {
	for _, combo := range proxyCombos {
		t.Run(combo.String(), func(t *testing.T) {
			dir := shortTempDir(t)
			uds := filepath.Join(dir, "konnectivity.sock")
			cp := testenv.StartControlPlane(t, controlplane.Options{EgressSelections: []controlplane.EgressSelection{{
				Name: controlplane.EgressCluster, ProxyProtocol: controlplane.ProxyGRPC, UDSName: uds,
			}}})
			runEgressScenario(t, combo, cp, dir, serverConfig{Mode: "grpc", UDS: uds})
		})
	}
}

// TestHTTPConnectOverTCP: kube-apiserver → (HTTP CONNECT over TCP, mTLS
// with certificates of the control plane's CA) → proxy server → agent →
// kubelet.
func TestHTTPConnectOverTCP(t *testing.T) {
	for _, combo := range proxyCombos {
		t.Run(combo.String(), func(t *testing.T) {
			dir := shortTempDir(t)
			frontend := freePorts(t, 1)[0]
			cp := testenv.StartControlPlane(t, controlplane.Options{EgressSelections: []controlplane.EgressSelection{{
				Name: controlplane.EgressCluster, ProxyProtocol: controlplane.ProxyHTTPConnect,
				URL: fmt.Sprintf("https://127.0.0.1:%d", frontend),
				// CABundle and the client certificate default to the control plane's CA.
			}}})
			serving, err := cp.IssueServingCert("proxy-server-frontend", "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			runEgressScenario(t, combo, cp, dir, serverConfig{
				Mode: "http-connect", FrontendPort: frontend,
				FrontendCert: serving.CertFile, FrontendKey: serving.KeyFile, FrontendCA: cp.CAFile(),
			})
		})
	}
}

// runEgressScenario starts the proxy server (srv's frontend filled in by the
// caller), a simulated node with an HTTPS kubelet, and checks that
//   - without an agent, node proxy fails and the kubelet sees nothing:
//     kube-apiserver does not dial the kubelet directly;
//   - with an agent, node proxy /healthz and a pod's logs answer, every
//     kubelet connection is held by the agent process, and the agent
//     counted its dials;
//   - with the agent stopped again, requests fail again.
func runEgressScenario(t *testing.T, combo proxyCombo, cp *controlplane.ControlPlane, dir string, srv serverConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	serverImpl, agentImpl := implOf(t, combo.server), implOf(t, combo.agent)

	// Proxy server: agents connect with mTLS (certificates of the CA).
	agentServing, err := cp.IssueServingCert("proxy-server-agent-side", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv.AgentCert, srv.AgentKey, srv.AgentCA = agentServing.CertFile, agentServing.KeyFile, cp.CAFile()
	server := startProxyServerOnFreePorts(t, combo.server, dir, &srv)

	// A node whose kubelet serves HTTPS on its node IP with a certificate of
	// the CA (kube-apiserver runs with --kubelet-certificate-authority) and
	// requires kube-apiserver's kubelet client certificate.
	//
	// kube-apiserver refuses node proxy to an address that is not global
	// unicast ("address not allowed"), loopback included; pod logs have no
	// such check. So the node takes this machine's first global unicast
	// IPv4 address when it has one, else a loopback address and node proxy
	// is not checked.
	nodeIP, proxyable := hostAddress()
	if !proxyable {
		nodeIP = netip.AddrFrom4([4]byte{127, 252, byte(1 + rand.IntN(250)), byte(1 + rand.IntN(250))})
		t.Logf("no global unicast IPv4 address on this machine: node %s on loopback, node proxy not checked", nodeIP)
	}
	node := fmt.Sprintf("netproxy-%s-%d", strings.ReplaceAll(nodeIP.String(), ".", "-"), rand.IntN(1000))
	kubeletCert, err := cp.IssueServingCert("kubelet-"+node, nodeIP.String())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kubeletCert.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	owners := &ownerLog{}
	kubelet, err := nodesim.StartKubelet(nodesim.KubeletOptions{
		NodeName: node, Address: nodeIP.String(), Certificate: cert, ClientCAs: cp.CAPool(),
		OnRequest: func(r nodesim.KubeletRequest) {
			pids := cp.PIDs()
			if a := owners.agent(); a != nil {
				pids["proxy-agent"] = a.PID()
			}
			pids["proxy-server"] = server.PID()
			owner, err := socketOwner(r.Remote, r.Local, pids)
			if err != nil {
				owner = "unknown (" + err.Error() + ")"
			}
			owners.add(r.Path + " from " + r.Remote.String() + " held by " + owner + " as " + r.ClientCN)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kubelet.Close() })
	sim := nodesim.New(client, 1)
	if err := sim.Register(ctx, []nodesim.NodeSpec{{Name: node, NodeIPs: []string{nodeIP.String()}, KubeletPort: kubelet.Port()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Delete(context.Background(), []string{node}) })
	pod := createPod(ctx, t, client, node)

	nodeHealthz := func() (string, error) {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		b, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "healthz").DoRaw(rctx)
		if err != nil {
			// A proxy error is not a Status: say what kube-apiserver said.
			return "", fmt.Errorf("%w: %s", err, b)
		}
		return string(b), nil
	}
	podLogs := func() (string, error) {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		b, err := client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "app"}).DoRaw(rctx)
		if err != nil {
			return "", fmt.Errorf("%w: %s", err, b)
		}
		return string(b), nil
	}

	// 1. No agent: the egress selector forces the proxy, which has no way
	// to the node; kube-apiserver does not fall back to dialing it. Over
	// GRPC the server's reason reaches the error; over HTTP CONNECT only
	// the status does, and kube-apiserver names the proxy.
	wantErr := serverImpl.noAgent
	if srv.Mode == "http-connect" {
		wantErr = fmt.Sprintf("proxy error from 127.0.0.1:%d", srv.FrontendPort)
	}
	for what, call := range map[string]func() (string, error){"node proxy": nodeHealthz, "pod logs": podLogs} {
		if what == "node proxy" && !proxyable {
			continue
		}
		_, err := call()
		if err == nil {
			t.Fatalf("%s without a proxy agent succeeded: kube-apiserver did not use the egress proxy", what)
		}
		t.Logf("without an agent, %s fails as it should: %v", what, err)
		if wantErr != "" && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s error without an agent does not say %q: %v", what, wantErr, err)
		}
	}
	if n := len(kubelet.Requests()); n != 0 {
		t.Fatalf("the kubelet got %d requests without an agent: %v", n, owners.all())
	}

	// 2. An agent connects: requests pass, through it.
	ap := freePorts(t, 2)
	clientCert, err := cp.IssueClientCert("proxy-agent", "system:konnectivity-agent")
	if err != nil {
		t.Fatal(err)
	}
	agent := startProxyAgent(t, combo.agent, dir, agentConfig{
		ID: "agent-1", ServerPort: srv.AgentPort, CA: cp.CAFile(), Cert: clientCert.CertFile, Key: clientCert.KeyFile,
		HealthPort: ap[0], AdminPort: ap[1],
	})
	owners.setAgent(agent)
	agent.waitReady(t, 30*time.Second)
	server.waitReady(t, 30*time.Second)
	assertProtocol(t, combo, server)
	dialsBefore := agentImpl.agentDials(agent.metrics(t))

	var logs string
	testenv.Eventually(t, 30*time.Second, "pod logs through the agent", func() (bool, string) {
		logs, err = podLogs()
		return err == nil, fmt.Sprint(err)
	})
	if !strings.Contains(logs, "pod "+pod.Namespace+"/"+pod.Name) || !strings.Contains(logs, "on node "+node) {
		t.Errorf("pod logs = %q, want lines naming the pod and node %s", logs, node)
	}
	t.Logf("logs through the agent:\n%s", logs)
	want := 1
	if proxyable {
		body, err := nodeHealthz()
		if err != nil {
			t.Fatalf("node proxy /healthz through the agent: %v", err)
		}
		if body != "ok" {
			t.Errorf("node proxy /healthz = %q, want ok", body)
		}
		want++
	}

	reqs := kubelet.Requests()
	if len(reqs) < want {
		t.Fatalf("kubelet served %d requests, want at least %d: %v", len(reqs), want, owners.all())
	}
	for _, line := range owners.all() {
		t.Logf("kubelet request: %s", line)
		if !strings.Contains(line, "held by proxy-agent") {
			t.Errorf("kubelet connection not from the agent: %s", line)
		}
		if !strings.HasSuffix(line, " as kube-apiserver-kubelet-client") {
			t.Errorf("kubelet request without kube-apiserver's client certificate (TLS not end to end): %s", line)
		}
	}
	dials := agentImpl.agentDials(agent.metrics(t)) - dialsBefore
	if dials < 1 {
		t.Errorf("agent dial count grew by %v, want ≥ 1", dials)
	}
	t.Logf("agent dialed %v connections for %d kubelet requests", dials, len(reqs))

	// 3. The agent goes away: the proxy has no way to the node again.
	agent.stop()
	owners.setAgent(nil)
	served := len(kubelet.Requests())
	testenv.Eventually(t, 30*time.Second, "pod logs to fail without the agent", func() (bool, string) {
		_, err := podLogs()
		return err != nil, "still answer"
	})
	if proxyable {
		if _, err := nodeHealthz(); err == nil {
			t.Error("node proxy without an agent succeeded")
		}
	}
	if n := len(kubelet.Requests()) - served; n > 1 {
		// One request may have raced the agent's exit.
		t.Errorf("the kubelet got %d requests after the agent stopped", n)
	}
}

// hostAddress returns this machine's first global unicast IPv4 address (not
// loopback): kube-apiserver proxies to nodes only at such addresses.
func hostAddress() (netip.Addr, bool) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && p.Addr().IsGlobalUnicast() {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// ownerLog records who held each kubelet connection.
type ownerLog struct {
	mu    sync.Mutex
	lines []string
	a     *proxyProc
}

func (o *ownerLog) add(line string) { o.mu.Lock(); o.lines = append(o.lines, line); o.mu.Unlock() }
func (o *ownerLog) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines...)
}
func (o *ownerLog) setAgent(p *proxyProc) { o.mu.Lock(); o.a = p; o.mu.Unlock() }
func (o *ownerLog) agent() *proxyProc {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.a
}

// createPod creates a namespace and a pod bound to node (no scheduler, no
// pod runner: the logs request needs only the pod and its node).
func createPod(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "netproxy-"}}
	ns, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No kube-controller-manager makes the default ServiceAccount.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if _, err := client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "logger", Namespace: ns.Name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	pod, err = client.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}
