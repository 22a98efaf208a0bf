package netproxy

// Agents' identity bound to their credential, against a real
// kube-apiserver: pod-bound ServiceAccount tokens carry the node their pod
// runs on (TokenReview extra authentication.kubernetes.io/node-name), and
// the server grants a claim only for that Node's name and addresses.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
	"github.com/portside-io/portside/internal/testenv"
)

const agentAudience = "system:konnectivity-server"

// TestImpostorAgent: the agent of node B holds a valid credential for B
// (a pod-bound token, or a client certificate system:node:node-b) and
// claims node A's name and address, cidr=0.0.0.0/0 and default-route; the
// honest agent of node A claims A. Every dial to A's address must go to
// the honest agent (0 to the impostor), and every one must succeed.
func TestImpostorAgent(t *testing.T) {
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The destination listens on node A's address; node B's is another
	// loopback address nobody serves.
	dest := listenTCP(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
	destHost, _, _ := net.SplitHostPort(dest)
	createNode(t, cs, "node-a", destHost)
	createNode(t, cs, "node-b", "127.0.0.2")
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "konnectivity-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	impostorClaims := url.Values{"host": {"node-a"}, "ipv4": {destHost}, "cidr": {"0.0.0.0/0"}, "default-route": {"true"}}.Encode()
	honestClaims := url.Values{"host": {"node-a"}, "ipv4": {destHost}}.Encode()

	t.Run("pod-bound tokens", func(t *testing.T) {
		dir := t.TempDir()
		tokenA, tokenB := podBoundToken(t, cs, dir, "node-a"), podBoundToken(t, cs, dir, "node-b")
		runImpostor(t, cs, dest, server.Options{UDSName: filepath.Join(dir, "proxy.sock"), NodeClient: cs,
			TokenAuth: &server.TokenAuth{Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: agentAudience, Client: cs}},
			agent.Options{AgentID: "honest", AgentIdentifiers: honestClaims, ServiceAccountTokenPath: tokenA},
			agent.Options{AgentID: "impostor", AgentIdentifiers: impostorClaims, ServiceAccountTokenPath: tokenB})
	})
	// --allow-certificate-agents: one server takes pod-bound tokens and node
	// certificates (`up --install=chart`: the chart's agents have tokens,
	// the host's gateway agent a certificate); each credential still binds
	// its agent to its own node, whichever the impostor holds.
	for _, tc := range []struct{ name, honest, impostor string }{
		{"token and certificate agents on one server: the impostor has a certificate", "token", "cert"},
		{"token and certificate agents on one server: the impostor has a token", "cert", "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ca := newTestCA(t, dir, "agents-ca")
			srvCert, srvKey := ca.issue(t, "server", "proxy-server", true)
			agentOpts := func(id, node, claims, cred string) agent.Options {
				o := agent.Options{AgentID: id, AgentIdentifiers: claims}
				if cred == "token" {
					o.ServiceAccountTokenPath = podBoundToken(t, cs, dir, node)
					pool, err := x509Pool(ca.File)
					if err != nil {
						t.Fatal(err)
					}
					o.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
				} else {
					cert, key := ca.issue(t, node, "system:node:"+node, false)
					o.TLS = clientTLS(t, ca.File, cert, key)
				}
				return o
			}
			st := serverTLS(t, ca.File, srvCert, srvKey)
			st.ClientAuth = tls.VerifyClientCertIfGiven
			runImpostor(t, cs, dest, server.Options{UDSName: filepath.Join(dir, "proxy.sock"), NodeClient: cs, AgentTLS: st, CertificateAgents: true,
				TokenAuth: &server.TokenAuth{Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: agentAudience, Client: cs}},
				agentOpts("honest", "node-a", honestClaims, tc.honest), agentOpts("impostor", "node-b", impostorClaims, tc.impostor))
		})
	}
	t.Run("node certificates", func(t *testing.T) {
		dir := t.TempDir()
		ca := newTestCA(t, dir, "agents-ca")
		srvCert, srvKey := ca.issue(t, "server", "proxy-server", true)
		certA, keyA := ca.issue(t, "node-a", "system:node:node-a", false)
		certB, keyB := ca.issue(t, "node-b", "system:node:node-b", false)
		runImpostor(t, cs, dest, server.Options{UDSName: filepath.Join(dir, "proxy.sock"), NodeClient: cs,
			AgentTLS: serverTLS(t, ca.File, srvCert, srvKey)},
			agent.Options{AgentID: "honest", AgentIdentifiers: honestClaims, TLS: clientTLS(t, ca.File, certA, keyA)},
			agent.Options{AgentID: "impostor", AgentIdentifiers: impostorClaims, TLS: clientTLS(t, ca.File, certB, keyB)})
	})
}

func runImpostor(t *testing.T, cs kubernetes.Interface, dest string, so server.Options, honest, impostor agent.Options) {
	ctx := context.Background()
	srvReg := prometheus.NewRegistry()
	so.Registry = srvReg
	// portsideDestCIDR too, so the impostor's cidr=0.0.0.0/0 would route
	// if the server granted it.
	so.Strategies = []server.Strategy{server.StrategyDestHost, server.StrategyDestCIDR, server.StrategyDefaultRoute}
	s := netproxytest.StartServer(t, so)
	impostorReg, honestReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	// The impostor connects first, so it is there whenever a dial is routed.
	impostor.ServerAddress, impostor.Registry = s.AgentAddr().String(), impostorReg
	imp, _ := netproxytest.StartAgent(t, impostor)
	netproxytest.Eventually(t, 10*time.Second, imp.Ready, "the impostor connected (its credential is valid)")
	honest.ServerAddress, honest.Registry = s.AgentAddr().String(), honestReg
	netproxytest.StartAgent(t, honest)
	netproxytest.Eventually(t, 10*time.Second, func() bool { return s.AgentCount() == 2 }, "both agents connected")

	// The honest agent's claims are granted once the server has seen its
	// Node; until then no agent may serve A.
	testenv.Eventually(t, 15*time.Second, "a first dial to node A", func() (bool, string) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := dial(dctx, t, so.UDSName, dest)
		if err != nil {
			return false, err.Error()
		}
		_ = c.Close()
		return true, ""
	})
	const dials = 60
	for i := range dials {
		c, err := dial(ctx, t, so.UDSName, dest)
		if err != nil {
			t.Fatalf("dial %d to node A: %v", i, err)
		}
		if err := echoOnce(c, "hello "+strconv.Itoa(i), 5*time.Second); err != nil {
			t.Fatalf("dial %d to node A: %v", i, err)
		}
		_ = c.Close()
	}
	if n := agentDials(t, impostorReg); n != 0 {
		t.Errorf("the impostor agent received %v dials to node A's address, want 0", n)
	}
	if n := agentDials(t, honestReg); n < dials {
		t.Errorf("the honest agent received %v dials, want at least %d", n, dials)
	}
	for _, d := range []struct{ kind, reason string }{{"host", server.DenyNotOwnHost}, {"ipv4", server.DenyNotOwnAddr},
		{"cidr", server.DenyRouteClaim}, {"default-route", server.DenyRouteClaim}} {
		if v := counterValue(t, srvReg, "konnectivity_network_proxy_server_portside_agent_identifiers_denied_total",
			map[string]string{"kind": d.kind, "reason": d.reason}); v < 1 {
			t.Errorf("denied identifiers metric{kind=%s,reason=%s} = %v, want ≥ 1", d.kind, d.reason, v)
		}
	}
	// The impostor's own Node tells its operator (kubectl describe node).
	testenv.Eventually(t, 10*time.Second, "an AgentIdentifiersDenied event on node-b", func() (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=node-b,reason=" + server.ReasonAgentIdentifiersDenied})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "cidr=0.0.0.0/0 (route_not_allowed)") &&
				strings.Contains(e.Message, "ipv4="+destHostOf(dest)+" (not_own_address)") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events: %v", len(evs.Items), evs.Items)
	})
}

func destHostOf(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }

func serverTLS(t *testing.T, caFile, cert, key string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := x509Pool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

func clientTLS(t *testing.T, caFile, cert, key string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := x509Pool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func createNode(t *testing.T, cs kubernetes.Interface, name, ip string) {
	t.Helper()
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podBoundToken is the token the kubelet would project into an agent pod
// on node: a TokenRequest bound to a pod scheduled there. It returns the
// token file.
func podBoundToken(t *testing.T, cs kubernetes.Interface, dir, node string) string {
	t.Helper()
	ctx := context.Background()
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "konnectivity-agent",
			Containers: []corev1.Container{{Name: "proxy-agent", Image: "portside"}}}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // an earlier subtest's agent pod on the node
		pod, err = cs.CoreV1().Pods("kube-system").Get(ctx, "agent-"+node, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "konnectivity-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{agentAudience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "token-"+node)
	if err := os.WriteFile(p, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// agentDials is how many dials the agent made (its dial latency samples).
func agentDials(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "konnectivity_network_proxy_agent_dial_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
