package netproxy_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
)

// TestNodeChangeRevokesGrants: an agent bound to node-a by its pod-bound
// token may serve the addresses node-a's Node lists, and only while it
// lists them: when the Node's address changes (a machine replaced, an
// address reused) or the Node is deleted, new dials to the old address no
// longer reach the agent; when the address comes back, they do again.
func TestNodeChangeRevokesGrants(t *testing.T) {
	ctx := context.Background()
	echo := netproxytest.Listen(t, netproxytest.Echo)
	host, _, _ := net.SplitHostPort(echo)
	cs := fake.NewSimpleClientset(nodeWith("node-a", host))
	s, uds, pki := startNodeBoundServer(t, cs)
	startNodeAgent(t, s, pki, "node-a", "ipv4="+host)
	netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")

	reaches := func() bool { return reachesVia(ctx, uds, echo) }
	netproxytest.Eventually(t, 10*time.Second, reaches, "a dial of node-a's address through its agent")

	setAddr := func(addr string) {
		t.Helper()
		if _, err := cs.CoreV1().Nodes().Update(ctx, nodeWith("node-a", addr), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setAddr("10.255.0.1")
	refused := func() bool { return refusedVia(ctx, uds, echo) }
	netproxytest.Eventually(t, 10*time.Second, refused, "the old address refused once node-a no longer lists it")
	setAddr(host)
	netproxytest.Eventually(t, 10*time.Second, reaches, "the address served again once node-a lists it again")
	if err := cs.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	netproxytest.Eventually(t, 10*time.Second, refused, "the address refused once node-a is deleted")
}

// TestContestedAddressServedByNobody: node-b's kubelet (its own Node's
// status is writable by it) lists node-a's address too. While it does,
// neither agent may serve that address: node-a's traffic must not go to
// node-b's agent. When node-b stops listing it, node-a's agent serves it
// again.
func TestContestedAddressServedByNobody(t *testing.T) {
	ctx := context.Background()
	echo := netproxytest.Listen(t, netproxytest.Echo)
	host, _, _ := net.SplitHostPort(echo)
	cs := fake.NewSimpleClientset(nodeWith("node-a", host), nodeWith("node-b", "127.0.0.99"))
	s, uds, pki := startNodeBoundServer(t, cs)
	// node-b's agent claims node-a's address from the start.
	startNodeAgent(t, s, pki, "node-a", "ipv4="+host)
	startNodeAgent(t, s, pki, "node-b", "ipv4="+host+"&host="+host)
	netproxytest.Eventually(t, 5*time.Second, func() bool { return s.AgentCount() == 2 }, "both agents connected")
	reaches := func() bool { return reachesVia(ctx, uds, echo) }
	netproxytest.Eventually(t, 10*time.Second, reaches, "node-a's address served (by node-a's agent only: node-b's claim is denied)")
	if _, err := cs.CoreV1().Nodes().Update(ctx, nodeWith("node-b", "127.0.0.99", host), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := func() bool { return refusedVia(ctx, uds, echo) }
	netproxytest.Eventually(t, 10*time.Second, refused, "node-a's address served by nobody while node-b lists it too")
	// node-a's operator is told which Node lists its address too.
	netproxytest.Eventually(t, 10*time.Second, func() bool {
		evs, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "node-a" && strings.Contains(e.Message, "ipv4="+host+" (contested: also listed by Node node-b)") {
				return true
			}
		}
		return false
	}, "an event on node-a naming node-b")
	if _, err := cs.CoreV1().Nodes().Update(ctx, nodeWith("node-b", "127.0.0.99"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	netproxytest.Eventually(t, 10*time.Second, reaches, "node-a's address served again once node-b no longer lists it")
	// The same address listed as a host name (Hostname, ExternalDNS) and
	// claimed as host=: one claim to routing, so contested too.
	asName := nodeWith("node-b", "127.0.0.99")
	asName.Status.Addresses = append(asName.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: host})
	if _, err := cs.CoreV1().Nodes().Update(ctx, asName, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	netproxytest.Eventually(t, 10*time.Second, refused, "node-a's address served by nobody while node-b lists it as its Hostname")
}

// TestOpenConnectionsRevoked: a connection routed by an address holds
// only while the agent does. When node-a's Node stops listing the address,
// or another Node lists it too, connections already open through node-a's
// agent to it are closed, not only new dials refused; a change that
// keeps the address (another address added) leaves them open. On each
// link an agent may speak: portside-link/2, gRPC with per-connection
// streams, and upstream's multiplexed protocol.
func TestOpenConnectionsRevoked(t *testing.T) {
	for _, proto := range []struct {
		name            string
		opts            agent.Options
		links, streams1 int // the server's count of agents on each protocol
	}{
		{"portside-link", agent.Options{}, 1, 0},
		{"streams-v1", agent.Options{DisableLink: true}, 0, 1},
		{"upstream-protocol", agent.Options{DisableLink: true, DisableStreams: true}, 0, 0},
	} {
		t.Run(proto.name, func(t *testing.T) {
			ctx := context.Background()
			echo := netproxytest.Listen(t, netproxytest.Echo)
			host, _, _ := net.SplitHostPort(echo)
			cs := fake.NewSimpleClientset(nodeWith("node-a", host), nodeWith("node-b", "127.0.0.99"))
			s, uds, pki := startNodeBoundServer(t, cs)
			startNodeAgentWith(t, s, pki, "node-a", "ipv4="+host+"&ipv4=127.0.0.98", proto.opts)
			netproxytest.Eventually(t, 5*time.Second, s.Ready, "agent connected")
			if s.LinkAgents() != proto.links || s.StreamsV1Agents() != proto.streams1 {
				t.Fatalf("agent protocol: %d on portside-link/2, %d on streams-v1; want %d and %d", s.LinkAgents(), s.StreamsV1Agents(), proto.links, proto.streams1)
			}
			netproxytest.Eventually(t, 10*time.Second, func() bool { return reachesVia(ctx, uds, echo) }, "node-a's address served")

			open := func() net.Conn {
				t.Helper()
				// The tunnel lives as long as its context: ended at cleanup.
				dctx, cancel := context.WithCancel(ctx)
				t.Cleanup(cancel)
				c, err := dialUDS(dctx, uds, echo)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				if err := roundTrip(c, 64); err != nil {
					t.Fatal(err)
				}
				return c
			}
			update := func(n *corev1.Node) {
				t.Helper()
				if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			// A second address added, the first kept: the grant stands.
			kept := open()
			update(nodeWith("node-a", host, "127.0.0.98"))
			// Seen once a dial of the new address reaches the agent (it
			// answers connection refused: nothing listens there).
			netproxytest.Eventually(t, 10*time.Second, func() bool { return !refusedVia(ctx, uds, "127.0.0.98:9") }, "node-a's added address routed")
			if err := roundTrip(kept, 64); err != nil {
				t.Fatalf("a connection whose address node-a still lists was cut: %v", err)
			}

			// The address dropped from node-a's Node: kept is closed.
			update(nodeWith("node-a", "127.0.0.98"))
			waitClosed(t, kept, "node-a no longer lists the address")
			update(nodeWith("node-a", host, "127.0.0.98"))
			netproxytest.Eventually(t, 10*time.Second, func() bool { return reachesVia(ctx, uds, echo) }, "served again once listed again")

			// Contested: node-b lists node-a's address too.
			contested := open()
			update(nodeWith("node-b", "127.0.0.99", host))
			waitClosed(t, contested, "node-b lists node-a's address too")
			if !refusedVia(ctx, uds, echo) {
				t.Error("a new dial of the contested address was not refused")
			}
		})
	}
}

// waitClosed fails t unless c's far end closes it within 10 s (a read
// returns an error or EOF), sending nothing more. The konnectivity
// client's connections ignore read deadlines, so the read runs apart.
func waitClosed(t *testing.T, c net.Conn, why string) {
	t.Helper()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := c.Read(make([]byte, 64))
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err == nil || r.n > 0 {
			t.Fatalf("open connection not closed after %s: read %d bytes, err %v", why, r.n, r.err)
		}
	case <-time.After(10 * time.Second):
		c.Close() // ends the read
		t.Fatalf("open connection still open 10 s after %s", why)
	}
}

// startNodeBoundServer runs a proxy server (destHost) whose agents
// authenticate with pod-bound tokens "token-of-<node>", reviewed by cs as
// bound to <node>, and whose Nodes are cs's; its agent port is mTLS with
// the returned PKI's certificates (startNodeAgent), as deployed.
func startNodeBoundServer(t *testing.T, cs *fake.Clientset) (*server.Server, string, *netproxytest.PKI) {
	t.Helper()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tok := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview).Spec.Token
		return true, &authv1.TokenReview{Status: authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"aud"},
			User: authv1.UserInfo{Username: "system:serviceaccount:kube-system:konnectivity-agent",
				Extra: map[string]authv1.ExtraValue{server.NodeNameExtra: {strings.TrimPrefix(tok, "token-of-")}}}}}, nil
	})
	strategies, err := server.ParseStrategies("destHost")
	if err != nil {
		t.Fatal(err)
	}
	uds := filepath.Join(t.TempDir(), "proxy.sock")
	// mTLS on the agent port, as deployed: agents then speak portside-link/2.
	pki := netproxytest.NewPKI(t)
	s := netproxytest.StartServer(t, server.Options{UDSName: uds, NodeClient: cs, Strategies: strategies, AgentTLS: pki.ServerTLS(t),
		TokenAuth: &server.TokenAuth{Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: "aud", Client: cs}})
	return s, uds, pki
}

// startNodeAgent runs an agent with node's token, claiming claims; it is
// stopped when the test ends.
func startNodeAgent(t *testing.T, s *server.Server, pki *netproxytest.PKI, node, claims string) {
	t.Helper()
	startNodeAgentWith(t, s, pki, node, claims, agent.Options{})
}

// startNodeAgentWith is startNodeAgent with opts' protocol choices.
func startNodeAgentWith(t *testing.T, s *server.Server, pki *netproxytest.PKI, node, claims string, opts agent.Options) {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("token-of-"+node), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.AgentID, opts.AgentIdentifiers, opts.ServiceAccountTokenPath, opts.ServerAddress = "agent-"+node, claims, token, s.AgentAddr().String()
	opts.TLS = pki.ClientTLS(t, "agent-"+node)
	_, stop := netproxytest.StartAgent(t, opts)
	t.Cleanup(stop)
}

// reachesVia reports whether a dial of dest through the server's socket
// gets an echo back.
func reachesVia(ctx context.Context, uds, dest string) bool {
	return dialVia(ctx, uds, dest) == nil
}

// refusedVia reports whether the server refuses a dial of dest because no
// agent may serve it (not merely any failure).
func refusedVia(ctx context.Context, uds, dest string) bool {
	err := dialVia(ctx, uds, dest)
	return err != nil && strings.Contains(err.Error(), "No agent available")
}

// dialVia dials dest through the server's socket and checks an echo.
func dialVia(ctx context.Context, uds, dest string) error {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := dialUDS(dctx, uds, dest)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, 64)
}

// nodeWith is a Node with InternalIPs addrs.
func nodeWith(name string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}
