package netproxy_test

// The agent port under a flood of junk tokens, against a real
// kube-apiserver: reviews are cached (denials briefly), shared in flight
// and bounded, so a real agent reconnecting after a server restart is
// served at once and the apiserver sees a bounded number of TokenReviews.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	agentpb "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/netproxytest"
	"github.com/portside-io/portside/internal/netproxy/server"
	"github.com/portside-io/portside/internal/testenv"
)

const floodAudience = "system:konnectivity-server"

// countReviews counts the TokenReviews a client sends.
type countReviews struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countReviews) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestAgentPortFlood: junk-token streams from several goroutines, on
// another source address, flood the agent port before, during and after a
// server restart; the real agent must serve a dial within 2 s of the new
// server listening, and the TokenReviews stay bounded by the distinct
// junk tokens and the denial TTL, not the number of streams.
func TestAgentPortFlood(t *testing.T) {
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	var reviews atomic.Int64
	cfg := rest.CopyConfig(cp.RESTConfig())
	cfg.QPS, cfg.Burst = server.DefaultReviewQPS, server.DefaultReviewBurst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countReviews{rt, &reviews} })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "flood-") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	tokenFile := agentToken(t, cs, dir)
	echo := netproxytest.Listen(t, netproxytest.Echo)

	const denialTTL = time.Second
	start := func(name, agentAddr string) (*server.Server, string, func()) {
		uds := filepath.Join(dir, name+".sock")
		s, err := server.New(server.Options{UDSName: uds, AgentAddress: agentAddr, GracefulShutdownTimeout: time.Second,
			TokenAuth: &server.TokenAuth{Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: floodAudience,
				Client: cs, DenialTTL: denialTTL}})
		if err != nil {
			t.Fatalf("server.New: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Run(ctx) }()
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return s, uds, stop
	}
	s1, uds1, stop1 := start("s1", "127.0.0.1:0")
	agentAddr := s1.AgentAddr().String()
	netproxytest.StartAgent(t, agent.Options{AgentID: "real", ServerAddress: agentAddr, ServiceAccountTokenPath: tokenFile})
	serving := func(uds string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := dialUDS(ctx, uds, echo)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		return roundTrip(c, 64)
	}
	testenv.Eventually(t, 15*time.Second, "the agent serving before the flood", func() (bool, string) {
		if err := serving(uds1); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	before := reviews.Load()

	// The flood: workers × streams in flight each, junk tokens from a
	// small set, from 127.0.0.2 so the per-peer cap is the flooder's.
	const workers, inFlight, junkTokens = 8, 24, 20
	floodCtx, stopFlood := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var streams, accepted atomic.Int64
	var codesMu sync.Mutex
	seen := map[codes.Code]int{}
	for w := range workers {
		conn, err := grpc.NewClient(agentAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}, MinConnectTimeout: time.Second}),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
				return d.DialContext(ctx, "tcp", addr)
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		client := agentpb.NewAgentServiceClient(conn)
		for i := range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; floodCtx.Err() == nil; n++ {
					tok := fmt.Sprintf("junk-%d", (w*inFlight+i+n)%junkTokens)
					ctx := metadata.AppendToOutgoingContext(floodCtx, header.AgentID, "junk",
						header.AuthenticationTokenContextKey, header.AuthenticationTokenContextSchemePrefix+tok)
					ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					st, err := client.Connect(ctx)
					if err == nil {
						_, err = st.Recv()
					}
					cancel()
					streams.Add(1)
					code := status.Code(err)
					if code == codes.OK {
						accepted.Add(1)
					}
					codesMu.Lock()
					seen[code]++
					codesMu.Unlock()
					if code == codes.Unavailable && floodCtx.Err() == nil {
						time.Sleep(5 * time.Millisecond) // the server is restarting
					}
				}
			}()
		}
	}
	t.Cleanup(func() { stopFlood(); wg.Wait() })
	floodStart := time.Now()
	testenv.Eventually(t, 20*time.Second, "a thousand junk streams before the restart", func() (bool, string) {
		return streams.Load() >= 1000, fmt.Sprintf("%d streams", streams.Load())
	})

	// Restart the server on the same agent address, under the flood.
	stop1()
	s2, uds2, _ := start("s2", agentAddr)
	restarted := time.Now()
	var servedAfter time.Duration
	for {
		if err := serving(uds2); err == nil {
			servedAfter = time.Since(restarted)
			break
		} else if time.Since(restarted) > 10*time.Second {
			t.Fatalf("the agent is not serving 10 s after the restart under the flood (%d junk streams so far): %v", streams.Load(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Keep flooding the new server a little, then stop.
	testenv.Eventually(t, 20*time.Second, "thousands of junk streams", func() (bool, string) {
		return streams.Load() >= 3000 && time.Since(restarted) > time.Second, fmt.Sprintf("%d streams", streams.Load())
	})
	stopFlood()
	wg.Wait()
	flood := time.Since(floodStart)
	t.Logf("%d junk streams in %s (codes %v); served %s after the restart; %d TokenReviews during the flood",
		streams.Load(), flood.Round(time.Millisecond), seen, servedAfter.Round(time.Millisecond), reviews.Load()-before)
	if servedAfter > 2*time.Second {
		t.Errorf("the agent served %s after the restart, want within 2 s", servedAfter)
	}
	if accepted.Load() != 0 {
		t.Errorf("%d junk streams were accepted", accepted.Load())
	}
	// Each junk token is reviewed at most once per denial TTL per server
	// (two servers), plus the real agent's reconnects.
	limit := int64(2*junkTokens*(int(flood/denialTTL)+2) + 10)
	if n := reviews.Load() - before; n > limit {
		t.Errorf("the apiserver saw %d TokenReviews for %d streams of %d junk tokens in %s, want at most %d",
			n, streams.Load(), junkTokens, flood, limit)
	}
	if s2.AgentCount() != 1 {
		t.Errorf("%d agents on the new server, want the real one", s2.AgentCount())
	}
}

// agentToken is a token of the agents' ServiceAccount for floodAudience,
// written to a file in dir.
func agentToken(t *testing.T, cs kubernetes.Interface, dir string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "konnectivity-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "konnectivity-agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{floodAudience}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
