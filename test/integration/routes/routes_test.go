// Package routes tests the node IPAM and route controllers on a real
// kube-apiserver and a real local cloud, with a CCM of their own: a small
// dual-stack cluster CIDR so exhaustion is reachable.
package routes

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const cluster = "routes-test"

type fixture struct {
	t      *testing.T
	cloud  *localcloudtest.Cloud
	client kubernetes.Interface
	sim    *nodesim.Simulator
	opts   *manager.Options
	// metrics is the running CCM's /metrics URL.
	metrics string
}

// startCCM runs the CCM in-process until the returned stop is called.
func (f *fixture) startCCM() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := manager.Run(ctx, f.opts, manager.DefaultControllers(), func(a string) { addr <- a }); err != nil {
			f.t.Errorf("ccm exited: %v", err)
		}
	}()
	select {
	case a := <-addr:
		f.metrics = "https://" + a + "/metrics"
	case <-time.After(30 * time.Second):
		f.t.Fatal("CCM did not start serving")
	}
	return func() { cancel(); <-done }
}

func newFixture(t *testing.T) *fixture {
	lc := localcloudtest.Start(t)
	cfg := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	o := manager.NewOptions()
	o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", cfg, testenv.Kubeconfig(t)
	o.LeaderElect, o.SecurePort, o.BindAddress = false, 0, "127.0.0.1"
	o.ClusterName = cluster
	o.Controllers = []string{"nodeipam", "route"}
	o.AllocateNodeCIDRs = true
	// Four /24s, one taken by the service range: three nodes fit (IPv4 is
	// the scarce family), four /64s.
	o.ClusterCIDR = "10.100.0.0/22,fd00:10:100::/62"
	o.ServiceClusterIPRange = "10.100.3.0/24"
	o.RouteReconciliationPeriod = 2 * time.Second
	client := testenv.Client(t)
	f := &fixture{t: t, cloud: lc, client: client, sim: nodesim.New(client, 4), opts: o}
	// Each test owns its nodes: the next test's CCM must not see them.
	t.Cleanup(func() { _ = f.sim.Delete(context.Background(), f.sim.Names()) })
	return f
}

func (f *fixture) addNode(name string) {
	f.t.Helper()
	if _, err := f.cloud.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: name, Zone: "zone-a"}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.sim.Register(context.Background(), []nodesim.NodeSpec{{Name: name}}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) node(name string) *corev1.Node {
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return n
}

// eventually polls cond for up to timeout.
func (f *fixture) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) routes() map[string][]string {
	list, err := f.cloud.Client.ListRoutes(context.Background(), cluster)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, r := range list {
		if !r.Blackhole {
			out[r.TargetNode] = append(out[r.TargetNode], r.DestinationCIDR)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

func networkCondition(n *corev1.Node) (corev1.ConditionStatus, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

// waitRouted waits until a node has two pod CIDRs, a route for each and
// NetworkUnavailable=False/RouteCreated; it returns the CIDRs.
func (f *fixture) waitRouted(name string) []string {
	f.t.Helper()
	var cidrs []string
	f.eventually(20*time.Second, "routes of "+name, func() (bool, string) {
		n := f.node(name)
		if n == nil {
			return false, "no node"
		}
		cidrs = slices.Sorted(slices.Values(n.Spec.PodCIDRs))
		st, reason := networkCondition(n)
		got := f.routes()[name]
		return len(cidrs) == 2 && slices.Equal(got, cidrs) && st == corev1.ConditionFalse && reason == "RouteCreated",
			fmt.Sprintf("podCIDRs %v routes %v condition %s/%s", n.Spec.PodCIDRs, got, st, reason)
	})
	return cidrs
}

func (f *fixture) eventReasons(node string) []string {
	list, _ := f.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String(),
	})
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason)
	}
	return out
}

func TestPodCIDRsAndRoutes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stop := f.startCCM()
	defer func() { stop() }()

	// Three nodes: three distinct dual-stack pod CIDRs, six routes.
	nodes := []string{"rt-1", "rt-2", "rt-3"}
	alloc := map[string][]string{}
	seen := map[string]string{}
	for _, n := range nodes {
		f.addNode(n)
	}
	for _, n := range nodes {
		alloc[n] = f.waitRouted(n)
		for _, c := range alloc[n] {
			if other, dup := seen[c]; dup {
				t.Fatalf("%s and %s both got %s", n, other, c)
			}
			seen[c] = n
			if netip.MustParsePrefix(c).Overlaps(netip.MustParsePrefix("10.100.3.0/24")) {
				t.Fatalf("%s got %s, inside the service range", n, c)
			}
		}
		n := f.node(n)
		if n.Spec.PodCIDR != n.Spec.PodCIDRs[0] || !netip.MustParsePrefix(n.Spec.PodCIDRs[0]).Addr().Is4() {
			t.Fatalf("podCIDR %q, podCIDRs %v: want the IPv4 CIDR first, as in --cluster-cidr", n.Spec.PodCIDR, n.Spec.PodCIDRs)
		}
	}
	t.Logf("allocation: %v", alloc)

	// A fourth node finds the IPv4 range full: an event, no CIDR, no crash.
	f.addNode("rt-4")
	f.eventually(10*time.Second, "CIDRNotAvailable event on rt-4", func() (bool, string) {
		r := f.eventReasons("rt-4")
		return slices.Contains(r, "CIDRNotAvailable"), fmt.Sprint(r)
	})
	if n := f.node("rt-4"); len(n.Spec.PodCIDRs) != 0 {
		t.Fatalf("rt-4 got %v from a full range", n.Spec.PodCIDRs)
	}

	// Deleting rt-1 deletes its routes and frees its CIDRs: rt-4 gets them.
	if err := f.sim.Delete(ctx, []string{"rt-1"}); err != nil {
		t.Fatal(err)
	}
	f.eventually(20*time.Second, "rt-1's routes deleted", func() (bool, string) {
		r := f.routes()
		return len(r["rt-1"]) == 0, fmt.Sprint(r)
	})
	// (IPv4 sorts first; the IPv6 range still had a never-used /64.)
	alloc["rt-4"] = f.waitRouted("rt-4")
	if alloc["rt-4"][0] != alloc["rt-1"][0] {
		t.Fatalf("rt-4 got %v, want rt-1's freed %s", alloc["rt-4"], alloc["rt-1"][0])
	}

	// A route removed behind the controller's back comes back at resync.
	list, _ := f.cloud.Client.ListRoutes(ctx, cluster)
	for _, r := range list {
		if r.TargetNode == "rt-2" {
			if err := f.cloud.Client.DeleteRoute(ctx, r.Name); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	f.waitRouted("rt-2")

	// Restart: the same allocation, and a new node does not get a CIDR twice.
	stop()
	if err := f.sim.Delete(ctx, []string{"rt-3"}); err != nil { // deleted while the CCM is down
		t.Fatal(err)
	}
	f.addNode("rt-5")
	stop = f.startCCM()
	for _, n := range []string{"rt-2", "rt-4"} {
		if got := f.waitRouted(n); !slices.Equal(got, alloc[n]) {
			t.Fatalf("after restart %s has %v, want %v", n, got, alloc[n])
		}
	}
	if got := f.waitRouted("rt-5"); got[0] != alloc["rt-3"][0] {
		t.Fatalf("rt-5 got %v; the only free IPv4 CIDR is rt-3's %s", got, alloc["rt-3"][0])
	}
	f.eventually(10*time.Second, "rt-3's routes deleted after the restart", func() (bool, string) {
		r := f.routes()
		return len(r["rt-3"]) == 0 && len(r) == 3, fmt.Sprint(r)
	})

	// The cloud fails route creation: NetworkUnavailable stays True with
	// its reason and an event, then recovers once the cloud does.
	if err := f.sim.Delete(ctx, []string{"rt-5"}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "rt-5's routes deleted", func() (bool, string) {
		r := f.routes()
		return len(r["rt-5"]) == 0, fmt.Sprint(r)
	})
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "POST", PathPrefix: "/v1/routes", ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	f.addNode("rt-6")
	f.eventually(20*time.Second, "rt-6 NetworkUnavailable=True/NoRouteCreated", func() (bool, string) {
		n := f.node("rt-6")
		if n == nil {
			return false, "no node"
		}
		st, reason := networkCondition(n)
		return st == corev1.ConditionTrue && reason == "NoRouteCreated" && slices.Contains(f.eventReasons("rt-6"), "FailedToCreateRoute"),
			fmt.Sprintf("%s/%s %v", st, reason, f.eventReasons("rt-6"))
	})
	time.Sleep(time.Second)
	if st, reason := networkCondition(f.node("rt-6")); st != corev1.ConditionTrue || reason != "NoRouteCreated" {
		t.Fatalf("while the cloud fails: %s/%s", st, reason)
	}
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	f.waitRouted("rt-6")

	// The cloud throttles (429, Retry-After 1 s): the route waits, then lands.
	if err := f.sim.Delete(ctx, []string{"rt-6"}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "rt-6's routes deleted", func() (bool, string) {
		r := f.routes()
		return len(r["rt-6"]) == 0, fmt.Sprint(r)
	})
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "POST", PathPrefix: "/v1/routes", ThrottleRate: 1, RetryAfterSeconds: 1}}}); err != nil {
		t.Fatal(err)
	}
	f.addNode("rt-7")
	f.eventually(10*time.Second, "a throttled route call", func() (bool, string) {
		m := f.scrape()
		return strings.Contains(m, `portside_ccm_route_cloud_calls_total{operation="create",result="throttled"}`), "no throttled create in /metrics"
	})
	if err := f.cloud.Client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	f.waitRouted("rt-7")
	m := f.scrape()
	for _, want := range []string{
		`portside_ccm_nodeipam_cidrs_used{cluster_cidr="10.100.0.0/22"} 4`,
		`portside_ccm_nodeipam_cidrs_total{cluster_cidr="10.100.0.0/22"} 4`,
		`portside_ccm_nodeipam_allocations_total{result="success"}`,
		`portside_ccm_route_cloud_calls_total{operation="list",result="success"}`,
		`portside_ccm_route_cloud_calls_total{operation="delete",result="success"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func (f *fixture) scrape() string {
	f.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest(http.MethodGet, f.metrics, nil)
	req.Header.Set("Authorization", "Bearer "+testenv.ServiceAccountToken(f.t, "metrics-reader", "/metrics"))
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func TestCloudAllocator(t *testing.T) {
	f := newFixture(t)
	f.opts.CIDRAllocatorType, f.opts.ConfigureCloudRoutes, f.opts.ClusterCIDR, f.opts.ServiceClusterIPRange = "CloudAllocator", false, "", ""
	f.opts.Controllers = []string{"nodeipam"}
	defer f.startCCM()()
	ctx := context.Background()
	if _, err := f.cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "ca-1", Zone: "zone-a", PodCIDRs: []string{"10.200.5.0/24", "fd00:200:0:5::/64"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "ca-2", Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.Register(ctx, []nodesim.NodeSpec{{Name: "ca-1"}, {Name: "ca-2"}}); err != nil {
		t.Fatal(err)
	}
	f.eventually(20*time.Second, "ca-1's pod CIDRs from the cloud", func() (bool, string) {
		n := f.node("ca-1")
		if n == nil {
			return false, "no node"
		}
		return slices.Equal(n.Spec.PodCIDRs, []string{"10.200.5.0/24", "fd00:200:0:5::/64"}), fmt.Sprint(n.Spec.PodCIDRs)
	})
	f.eventually(20*time.Second, "CIDRNotAvailable on ca-2, whose instance has none", func() (bool, string) {
		r := f.eventReasons("ca-2")
		return slices.Contains(r, "CIDRNotAvailable"), fmt.Sprint(r)
	})
}

// TestRouteOfDeletedNodeWithGoneInstance: the usual way a node leaves (its
// instance is terminated, the route turns into a blackhole, then the Node is
// deleted) removes the route at once, without waiting for a resync.
func TestRouteOfDeletedNodeWithGoneInstance(t *testing.T) {
	f := newFixture(t)
	f.opts.RouteReconciliationPeriod = time.Hour
	defer f.startCCM()()
	ctx := context.Background()
	f.addNode("bh-1")
	f.waitRouted("bh-1")
	inst, err := f.cloud.Client.ListInstances(ctx, "bh-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range inst {
		if i.Name == "bh-1" {
			if err := f.cloud.Client.DeleteInstance(ctx, i.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.sim.Delete(ctx, []string{"bh-1"}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "bh-1's blackholed routes deleted", func() (bool, string) {
		list, err := f.cloud.Client.ListRoutes(ctx, cluster)
		return err == nil && len(list) == 0, fmt.Sprint(list, err)
	})
}

// TestRoutesWithoutNodeIPAM: as upstream's CCM, routes follow
// --configure-cloud-routes with --cluster-cidr alone, for pod CIDRs that
// another allocator (kube-controller-manager's node IPAM) gave; Portside's
// node IPAM stays off without --allocate-node-cidrs.
func TestRoutesWithoutNodeIPAM(t *testing.T) {
	f := newFixture(t)
	f.opts.AllocateNodeCIDRs = false
	defer f.startCCM()()
	ctx := context.Background()
	f.addNode("kcm-1")
	f.addNode("kcm-2")
	// kube-controller-manager's node IPAM would write this.
	patch := []byte(`{"spec":{"podCIDR":"10.100.1.0/24","podCIDRs":["10.100.1.0/24","fd00:10:100:1::/64"]}}`)
	if _, err := f.client.CoreV1().Nodes().Patch(ctx, "kcm-1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(20*time.Second, "kcm-1's routes from the pod CIDRs another allocator gave", func() (bool, string) {
		got := f.routes()["kcm-1"]
		return slices.Equal(got, []string{"10.100.1.0/24", "fd00:10:100:1::/64"}), fmt.Sprint(f.routes())
	})
	time.Sleep(time.Second)
	if n := f.node("kcm-2"); n == nil || len(n.Spec.PodCIDRs) != 0 {
		t.Fatalf("node IPAM ran without --allocate-node-cidrs: kcm-2 = %+v", n)
	}
	if r := f.routes()["kcm-2"]; len(r) != 0 {
		t.Fatalf("a node without pod CIDRs got routes: %v", r)
	}
}

// TestNodeBeingDeletedGetsNoCIDR: a node held by a finalizer while it is
// deleted gets no pod CIDR (it would hold a subnet it never uses).
func TestNodeBeingDeletedGetsNoCIDR(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.addNode("held-1")
	patch := []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)
	if _, err := f.client.CoreV1().Nodes().Patch(ctx, "held-1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.client.CoreV1().Nodes().Patch(context.Background(), "held-1", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := f.client.CoreV1().Nodes().Delete(ctx, "held-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer f.startCCM()()
	f.addNode("live-1")
	f.waitRouted("live-1")
	if n := f.node("held-1"); n == nil || n.DeletionTimestamp == nil || len(n.Spec.PodCIDRs) != 0 {
		t.Fatalf("a node being deleted got pod CIDRs (or is gone): %+v", n)
	}
}
