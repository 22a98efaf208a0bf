package netproxy

// Upstream's server metrics, name by name and label set by label set: the
// list is read from upstream v0.34.0's source (the module Portside builds
// against), and both servers, upstream's binary and `portside
// proxy-server`, are scraped after the same traffic.

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/testenv"
)

// family is a scraped or declared metric family: its type and label names
// (le and quantile aside).
type family struct {
	typ    string
	labels []string
}

func (f family) String() string { return f.typ + "{" + strings.Join(f.labels, ",") + "}" }

// upstreamServerFamilies reads upstream's server metric declarations:
// pkg/server/metrics (namespace konnectivity_network_proxy, subsystem
// server) and the stream metrics it makes with konnectivity-client's
// pkg/common/metrics.
func upstreamServerFamilies(t *testing.T) map[string]family {
	t.Helper()
	out := map[string]family{}
	for _, f := range []struct{ module, file string }{
		{"sigs.k8s.io/apiserver-network-proxy", "pkg/server/metrics/metrics.go"},
		{"sigs.k8s.io/apiserver-network-proxy/konnectivity-client", "pkg/common/metrics/metrics.go"},
	} {
		dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", f.module).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", f.module, err)
		}
		path := filepath.Join(strings.TrimSpace(string(dir)), f.file)
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, _ := sel.X.(*ast.Ident); x == nil || x.Name != "prometheus" || !strings.HasPrefix(sel.Sel.Name, "New") || len(call.Args) == 0 {
				return true
			}
			opts, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			name := ""
			for _, e := range opts.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok && fmt.Sprint(kv.Key) == "Name" {
					if lit, ok := kv.Value.(*ast.BasicLit); ok {
						name, _ = strconv.Unquote(lit.Value)
					}
				}
			}
			if name == "" {
				return true
			}
			fam := family{labels: []string{}}
			switch kind := strings.TrimSuffix(strings.TrimPrefix(sel.Sel.Name, "New"), "Vec"); kind {
			case "Histogram", "Gauge", "Counter", "Summary":
				fam.typ = strings.ToLower(kind)
			default:
				t.Fatalf("%s: prometheus.%s for %s", path, sel.Sel.Name, name)
			}
			if len(call.Args) > 1 {
				if ls, ok := call.Args[1].(*ast.CompositeLit); ok {
					for _, e := range ls.Elts {
						if lit, ok := e.(*ast.BasicLit); ok {
							l, _ := strconv.Unquote(lit.Value)
							fam.labels = append(fam.labels, l)
						}
					}
				}
			}
			slices.Sort(fam.labels)
			out["konnectivity_network_proxy_server_"+name] = fam
			return true
		})
	}
	if len(out) < 15 {
		t.Fatalf("read only %d metric declarations from upstream's source: %v", len(out), out)
	}
	return out
}

// parseFamilies reads a Prometheus text exposition.
func parseFamilies(t *testing.T, text string) map[string]family {
	t.Helper()
	out := map[string]family{}
	labels := map[string]map[string]bool{}
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			cur = name
			out[name] = family{typ: typ}
			labels[name] = map[string]bool{}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") || cur == "" {
			continue
		}
		_, ls, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		// name="value",...} v: values are quoted, with \" and \\ escapes.
		for ls != "" && ls[0] != '}' {
			name, rest, ok := strings.Cut(ls, "=\"")
			if !ok {
				t.Fatalf("bad sample line %q", line)
			}
			i := 0
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' {
					i++
				}
			}
			if name != "le" && name != "quantile" {
				labels[cur][name] = true
			}
			ls = strings.TrimPrefix(rest[min(i+1, len(rest)):], ",")
		}
	}
	for name, f := range out {
		f.labels = slices.Sorted(func(yield func(string) bool) {
			for l := range labels[name] {
				if !yield(l) {
					return
				}
			}
		})
		out[name] = f
	}
	return out
}

// TestServerMetricsAsUpstream: after the same traffic (a proxied echo, a
// dial the agent fails, a tunnel cancelled mid-stream, an expired Lease
// culled), `portside proxy-server`'s /metrics has every metric upstream
// declares, with its type and label names, and every family upstream's
// proxy-server binary serves (Go, process and promhttp collectors too).
func TestServerMetricsAsUpstream(t *testing.T) {
	declared := upstreamServerFamilies(t)
	cp := testenv.StartControlPlane(t, controlplane.Options{})
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	scraped := map[proxyKind]map[string]family{}
	for _, kind := range []proxyKind{kindANP, kindPortside} {
		t.Run(string(kind), func(t *testing.T) {
			e := newFaultEnv(t, proxyCombo{kind, kind})
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			label := "portside-metrics-test=" + string(kind) + "-" + run
			// A Lease of a server gone a minute ago, for the collector to cull.
			ctx := context.Background()
			old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
			gone := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "konnectivity-proxy-server-gone-" + run, Namespace: "kube-system",
				Labels: map[string]string{"portside-metrics-test": string(kind) + "-" + run}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gone"), LeaseDurationSeconds: ptr.To[int32](30), RenewTime: &old, AcquireTime: &old}}
			if _, err := cs.CoordinationV1().Leases("kube-system").Create(ctx, gone, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cfg := e.serverConfig("m-"+string(kind), 1)
			cfg.Extra = []string{"--proxy-strategies=destHost,default", "--enable-lease-controller",
				"--lease-label=" + label, "--kubeconfig=" + cp.KubeconfigPath}
			server := e.startServer(cfg)
			// Upstream's server is ready once its first strategy has an agent.
			agent := e.startAgent("a1", cfg.AgentPort, "--agent-identifiers=ipv4=127.0.0.1")
			agent.waitReady(t, 15*time.Second)
			server.waitReady(t, 15*time.Second)

			// A proxied connection, used and closed.
			c, err := dialEcho(t, cfg.UDS, e.echo, "hello")
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			// A dial the agent fails (nothing listens there).
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := l.Addr().String()
			_ = l.Close()
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if c, err := dial(dctx, t, cfg.UDS, closed); err == nil {
				_ = c.Close()
				t.Fatalf("a dial to %s (closed) succeeded", closed)
			}
			cancel()
			// A tunnel cancelled mid-stream: the server's Recv fails
			// (stream_errors_total{segment="from_client"}).
			tunnelCtx, cancelTunnel := context.WithCancel(ctx)
			dctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			tun, err := client.CreateSingleUseGrpcTunnelWithContext(dctx, tunnelCtx, "unix://"+cfg.UDS,
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			tc, err := tun.DialContext(dctx, "tcp", e.echo)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if err := echoOnce(tc, "before the cancel", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			cancelTunnel()
			<-tun.Done()
			_ = tc.Close()

			// The collector culls the expired Lease at start-up; the
			// comparison below tells what is missing if it never does.
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				text := server.metrics(t)
				f := parseFamilies(t, text)
				if strings.Contains(text, "konnectivity_network_proxy_server_culled_leases_count 1") &&
					len(f["konnectivity_network_proxy_server_lease_list_total"].labels) > 0 &&
					len(f["konnectivity_network_proxy_server_stream_errors_total"].labels) > 0 {
					break
				}
			}
			scraped[kind] = parseFamilies(t, server.metrics(t))
		})
	}
	up, mine := scraped[kindANP], scraped[kindPortside]
	if up == nil || mine == nil {
		t.Fatal("a server was not scraped")
	}
	for name, want := range declared {
		got, ok := mine[name]
		switch {
		case !ok:
			t.Errorf("portside proxy-server has no %s (upstream declares %v)", name, want)
		case got.String() != want.String():
			t.Errorf("portside proxy-server's %s is %v; upstream declares %v", name, got, want)
		}
		// The declarations are what upstream's binary serves, where it
		// serves them (full_receive_channels only once a channel filled).
		if u, ok := up[name]; ok && u.String() != want.String() {
			t.Errorf("upstream's binary serves %s as %v; its source declares %v", name, u, want)
		} else if !ok && name != "konnectivity_network_proxy_server_full_receive_channels" {
			t.Errorf("upstream's binary did not serve %s after the test's traffic", name)
		}
	}
	for name, want := range up {
		got, ok := mine[name]
		switch {
		case !ok:
			t.Errorf("portside proxy-server has no %s (upstream's binary serves %v)", name, want)
		case got.String() != want.String():
			t.Errorf("portside proxy-server's %s is %v; upstream's binary serves %v", name, got, want)
		}
	}
	t.Logf("%d families upstream declares, %d upstream's binary serves, %d Portside's", len(declared), len(up), len(mine))
}
