package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/nettest"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

const testToken = "test-token"

// testPools gives each test its own loopback ranges, so that test packages
// running at the same time never collide on VIPs.
func testPools() Options {
	a := byte(10 + rand.IntN(200))
	return Options{
		Token:      testToken,
		VIPPoolV4:  netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", a)),
		NodePoolV4: netip.MustParsePrefix(fmt.Sprintf("127.%d.1.0/24", a)),
		DataPlane:  dataplane.Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 200 * time.Millisecond},
	}
}

func startServer(t *testing.T) (*Server, *client.Client) {
	t.Helper()
	srv, err := New(context.Background(), filepath.Join(t.TempDir(), StateFile), testPools())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return srv, client.New(hs.URL, testToken)
}

func TestAuth(t *testing.T) {
	_, c := startServer(t)
	for _, tok := range []string{"", "wrong"} {
		_, err := client.New(c.Endpoint(), tok).Regions(context.Background())
		se, ok := err.(*client.StatusError)
		if !ok || se.Status != http.StatusUnauthorized || !strings.Contains(se.Message, "token") {
			t.Fatalf("token %q: want 401 naming the token, got %v", tok, err)
		}
	}
	if regions, err := c.Regions(context.Background()); err != nil || len(regions) != 1 || len(regions[0].Zones) != 3 {
		t.Fatalf("regions = %v, %v", regions, err)
	}
}

func TestInstances(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	inst, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-1", Zone: "zone-b", IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	if inst.Region != "region-1" || inst.State != api.InstanceRunning || inst.Type != "small" || len(inst.Addresses) != 4 {
		t.Fatalf("instance = %+v", inst)
	}
	v4, v6 := netip.MustParseAddr(inst.Addresses[0].Address), netip.MustParseAddr(inst.Addresses[1].Address)
	if !v4.Is4() || !v6.Is6() {
		t.Fatalf("addresses = %v", inst.Addresses)
	}
	if got, err := c.InstanceByName(ctx, "node-1"); err != nil || got.ID != inst.ID {
		t.Fatalf("by name: %+v %v", got, err)
	}
	if st, err := c.StopInstance(ctx, inst.ID); err != nil || st.State != api.InstanceStopped {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if st, err := c.StartInstance(ctx, inst.ID); err != nil || st.State != api.InstanceRunning {
		t.Fatalf("start: %+v %v", st, err)
	}
	if err := c.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInstance(ctx, inst.ID); !client.IsNotFound(err) {
		t.Fatalf("deleted instance: %v", err)
	}
	// The name and the address are free again.
	again, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-1", Zone: "zone-a"})
	if err != nil || again.Addresses[0].Address != v4.String() {
		t.Fatalf("recreate: %+v %v", again, err)
	}
}

func TestBadInputIsA4xxNamingTheProblem(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "dup", Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	lb := func(mut func(*api.LoadBalancerSpec)) api.LoadBalancerSpec {
		s := api.LoadBalancerSpec{Cluster: "c1", Listeners: []api.Listener{{Protocol: "TCP", Port: 8080, BackendPort: 30080}}}
		mut(&s)
		return s
	}
	cases := []struct {
		name   string
		call   func() error
		status int
		want   string
	}{
		{"unknown zone", func() error {
			_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "x", Zone: "mars-1"})
			return err
		}, 400, `unknown zone "mars-1"`},
		{"duplicate name", func() error {
			_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "dup", Zone: "zone-a"})
			return err
		}, 409, `"dup" already exists`},
		{"bad name", func() error {
			_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "Bad_Name", Zone: "zone-a"})
			return err
		}, 400, "instance name"},
		{"bad port", func() error {
			_, err := c.PutLoadBalancer(ctx, "lb", lb(func(s *api.LoadBalancerSpec) { s.Listeners[0].Port = 70000 }))
			return err
		}, 400, "listeners[0].port 70000"},
		{"bad protocol", func() error {
			_, err := c.PutLoadBalancer(ctx, "lb", lb(func(s *api.LoadBalancerSpec) { s.Listeners[0].Protocol = "SCTP" }))
			return err
		}, 400, `protocol "SCTP"`},
		{"bad source range", func() error {
			_, err := c.PutLoadBalancer(ctx, "lb", lb(func(s *api.LoadBalancerSpec) { s.SourceRanges = []string{"10.0.0.0/33"} }))
			return err
		}, 400, `sourceRanges[0] "10.0.0.0/33"`},
		{"bad data path", func() error {
			_, err := c.PutLoadBalancer(ctx, "lb", lb(func(s *api.LoadBalancerSpec) { s.DataPath = "ebpf" }))
			return err
		}, 400, `dataPath "ebpf" is not supported: use kernel`},
		{"bad backend", func() error {
			_, err := c.PutLoadBalancer(ctx, "lb", lb(func(s *api.LoadBalancerSpec) { s.Backends = []api.Backend{{Address: "node-1"}} }))
			return err
		}, 400, `backends[0].address "node-1"`},
		{"no IPv6 pool", func() error {
			_, err := c.PutLoadBalancer(ctx, "lb", lb(func(s *api.LoadBalancerSpec) { s.IPFamilies = []string{"IPv6"} }))
			return err
		}, 400, "--vip-pool-v6"},
		{"bad route CIDR", func() error {
			_, err := c.CreateRoute(ctx, api.Route{Cluster: "c1", Name: "r1", TargetNode: "dup", DestinationCIDR: "10.244.1.0"})
			return err
		}, 400, `destinationCIDR "10.244.1.0"`},
		{"route to unknown node", func() error {
			_, err := c.CreateRoute(ctx, api.Route{Cluster: "c1", Name: "r1", TargetNode: "ghost", DestinationCIDR: "10.244.1.0/24"})
			return err
		}, 400, `targetNode "ghost"`},
		{"volume across regions", func() error {
			_, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v", Zones: []string{"zone-a", "nowhere"}, SizeGiB: 1})
			return err
		}, 400, `unknown zone "nowhere"`},
		{"credential for unknown registry", func() error {
			_, err := c.Credential(ctx, api.CredentialRequest{Image: "registry.example.com/app:1"})
			return err
		}, 404, `"registry.example.com"`},
	}
	for _, tc := range cases {
		err := tc.call()
		se, ok := err.(*client.StatusError)
		if !ok || se.Status != tc.status || !strings.Contains(se.Message, tc.want) {
			t.Errorf("%s: want %d containing %q, got %v", tc.name, tc.status, tc.want, err)
		}
	}

	// Raw bodies: malformed, unknown field, oversized.
	raw := func(body []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, c.Endpoint()+"/v1/instances", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := raw([]byte(`{"name": "x",`)); code != 400 || !strings.Contains(body, "malformed JSON") {
		t.Errorf("malformed: %d %s", code, body)
	}
	if code, body := raw([]byte(`{"name": "x", "zone": "zone-a", "colour": "red"}`)); code != 400 || !strings.Contains(body, "colour") {
		t.Errorf("unknown field: %d %s", code, body)
	}
	if code, body := raw(bytes.Repeat([]byte(" "), maxBodyBytes+10)); code != 413 {
		t.Errorf("oversized: %d %s", code, body)
	}
	// Nothing was created by any of the bad requests.
	if list, _ := c.ListInstances(ctx, ""); len(list) != 1 {
		t.Errorf("bad requests changed state: %d instances", len(list))
	}
	if lbs, _ := c.ListLoadBalancers(ctx, ""); len(lbs) != 0 {
		t.Errorf("bad requests changed state: %d load balancers", len(lbs))
	}
}

func TestInjectedFaultsReachTheClient(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if err := c.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{
		{Method: "POST", PathPrefix: "/v1/instances", ThrottleRate: 1, RetryAfterSeconds: 7},
		{Method: "GET", PathPrefix: "/v1/regions", ErrorRate: 1},
		{Method: "GET", PathPrefix: "/v1/instance-types", LatencyMillis: 300},
	}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "n", Zone: "zone-a"})
	if d, ok := client.RetryAfter(err); !ok || d != 7*time.Second {
		t.Fatalf("want 429 with Retry-After 7s, got %v", err)
	}
	if _, err := c.Regions(ctx); err == nil || !strings.Contains(err.Error(), "500 InjectedFault") {
		t.Fatalf("want injected 500, got %v", err)
	}
	start := time.Now()
	if _, err := c.InstanceTypes(ctx); err != nil || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("want 300ms of injected latency, got %v after %v", err, time.Since(start))
	}
	if err := c.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "*", ErrorRate: 2}}}); err == nil {
		t.Fatal("errorRate 2 must be rejected")
	}
	if err := c.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "n", Zone: "zone-a"}); err != nil {
		t.Fatalf("after clearing faults: %v", err)
	}
}

func TestConcurrentCreatesNeverDuplicate(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, conflicts := 0, 0
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 20 names, each asked for three times at once.
			_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("n-%d", i%20), Zone: "zone-a"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case client.IsConflict(err):
				conflicts++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if created != 20 || conflicts != 40 {
		t.Fatalf("created %d, conflicts %d; want 20 and 40", created, conflicts)
	}
	list, _ := c.ListInstances(ctx, "")
	ips := map[string]bool{}
	for _, i := range list {
		ips[i.Addresses[0].Address] = true
	}
	if len(list) != 20 || len(ips) != 20 {
		t.Fatalf("%d instances with %d distinct addresses", len(list), len(ips))
	}
}

func TestRoutesVolumesCredentials(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	inst, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateRoute(ctx, api.Route{Cluster: "c1", Name: "r-a", TargetNode: "node-a", DestinationCIDR: "10.244.1.7/24"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateRoute(ctx, api.Route{Cluster: "c1", Name: "r-b", TargetNode: "node-a", DestinationCIDR: "10.244.1.128/25"}); !client.IsConflict(err) {
		t.Fatalf("overlapping route: %v", err)
	}
	routes, _ := c.ListRoutes(ctx, "c1")
	if len(routes) != 1 || routes[0].DestinationCIDR != "10.244.1.0/24" || routes[0].Blackhole {
		t.Fatalf("routes = %+v", routes)
	}
	_ = c.DeleteInstance(ctx, inst.ID)
	if routes, _ := c.ListRoutes(ctx, "c1"); len(routes) != 1 || !routes[0].Blackhole {
		t.Fatalf("route to a deleted instance must be a blackhole: %+v", routes)
	}
	if err := c.DeleteRoute(ctx, "r-a"); err != nil {
		t.Fatal(err)
	}

	vol, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", Zones: []string{"zone-a", "zone-b"}, SizeGiB: 10})
	if err != nil || vol.Region != "region-1" || len(vol.Zones) != 2 {
		t.Fatalf("volume = %+v %v", vol, err)
	}
	if got, err := c.GetVolume(ctx, vol.ID); err != nil || got.Name != "data" {
		t.Fatalf("get volume: %+v %v", got, err)
	}

	if _, err := c.CreateRegistry(ctx, "registry.example.com:5000"); err != nil {
		t.Fatal(err)
	}
	cred, err := c.Credential(ctx, api.CredentialRequest{Image: "registry.example.com:5000/team/app:1.0"})
	if err != nil || cred.Registry != "registry.example.com:5000" || cred.Password == "" || time.Until(cred.ExpiresAt) < 50*time.Minute {
		t.Fatalf("credential = %+v %v", cred, err)
	}
}

func TestLoadBalancerServesTrafficAndFollowsBackends(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	var backends []api.Backend
	var port int
	for _, name := range []string{"node-a", "node-b"} {
		inst, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
		if err != nil {
			t.Fatal(err)
		}
		ip := inst.Addresses[0].Address
		ln := nettest.NameServer(t, name, net.JoinHostPort(ip, fmt.Sprint(port)))
		port = ln.Addr().(*net.TCPAddr).Port
		backends = append(backends, api.Backend{Name: name, Address: ip})
	}
	lb, err := c.PutLoadBalancer(ctx, "web", api.LoadBalancerSpec{
		Cluster: "c1", Listeners: []api.Listener{{Protocol: "TCP", Port: 8080, BackendPort: port}}, Backends: backends,
	})
	if err != nil {
		t.Fatal(err)
	}
	if lb.State != api.LoadBalancerActive || len(lb.VIPs) != 1 {
		t.Fatalf("lb = %+v", lb)
	}
	vip := net.JoinHostPort(lb.VIPs[0], "8080")
	seen := map[string]int{}
	for range 10 {
		name, err := nettest.AskName(vip)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if len(seen) != 2 {
		t.Fatalf("traffic not balanced across both backends: %v", seen)
	}
	// Updating the backends moves the traffic; the VIP stays.
	lb2, err := c.SetBackends(ctx, "web", backends[1:])
	if err != nil || lb2.VIPs[0] != lb.VIPs[0] {
		t.Fatalf("set backends: %+v %v", lb2, err)
	}
	for range 5 {
		if name, err := nettest.AskName(vip); err != nil || name != "node-b" {
			t.Fatalf("after removing node-a: %q %v", name, err)
		}
	}
	h, err := c.LoadBalancerHealth(ctx, "web")
	if err != nil || len(h.Backends) < 1 {
		t.Fatalf("health = %+v %v", h, err)
	}
	// A load balancer of another cluster cannot take it over.
	if _, err := c.PutLoadBalancer(ctx, "web", api.LoadBalancerSpec{Cluster: "other", Listeners: lb.Listeners}); !client.IsConflict(err) {
		t.Fatalf("cross-cluster takeover: %v", err)
	}
	if err := c.DeleteLoadBalancer(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := nettest.AskName(vip); err == nil {
		t.Fatal("VIP still serves after delete")
	}
	if err := c.DeleteLoadBalancer(ctx, "web"); !client.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestMain(m *testing.M) {
	// Re-executed as a child by TestKill9Restart: be the cloud.
	if dir := os.Getenv(childDataDirEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	os.Exit(m.Run())
}
