package server

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/nettest"

	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

const (
	childDataDirEnv = "PORTSIDE_TEST_CLOUD_DATA_DIR"
	childPoolEnv    = "PORTSIDE_TEST_CLOUD_POOL_OCTET"
)

// runChild serves a cloud from the test binary, for crash tests.
func runChild(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var octet int
	_, _ = fmt.Sscan(os.Getenv(childPoolEnv), &octet)
	err := Run(ctx, RunOptions{
		DataDir: dir, Listen: "127.0.0.1:0",
		Options: Options{
			VIPPoolV4:  netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", octet)),
			NodePoolV4: netip.MustParsePrefix(fmt.Sprintf("127.%d.1.0/24", octet)),
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cloud:", err)
		return 1
	}
	return 0
}

// startChild runs the cloud in a child process and waits for its endpoint.
func startChild(t *testing.T, dir string, octet int) (*proc.Process, *client.Client) {
	t.Helper()
	_ = os.Remove(filepath.Join(dir, EndpointFile))
	p, err := proc.Start("cloud", os.Args[0], []string{"-test.run=^$"},
		[]string{childDataDirEnv + "=" + dir, fmt.Sprintf("%s=%d", childPoolEnv, octet)}, filepath.Join(dir, "cloud.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(dir, EndpointFile))
		if err == nil && len(data) > 0 {
			tok, _ := os.ReadFile(filepath.Join(dir, TokenFile))
			return p, client.New(strings.TrimSpace(string(data)), strings.TrimSpace(string(tok)))
		}
		select {
		case <-p.Done():
			t.Fatalf("cloud exited: %v\n%s", p.ExitErr(), p.LogTail(20))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cloud did not start:\n%s", p.LogTail(20))
		}
	}
}

// TestKill9Restart: state written before a kill -9 is all there after a
// restart, nothing is duplicated, and load balancers serve again.
func TestKill9Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test; skipped with -short")
	}
	dir := t.TempDir()
	octet := 10 + int(time.Now().UnixNano()%200)
	p, c := startChild(t, dir, octet)
	ctx := context.Background()

	inst, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	ip := inst.Addresses[0].Address
	ln := nettest.NameServer(t, "node-a", net.JoinHostPort(ip, "0"))
	port := ln.Addr().(*net.TCPAddr).Port
	lb, err := c.PutLoadBalancer(ctx, "web", api.LoadBalancerSpec{
		Cluster: "c1", Listeners: []api.Listener{{Protocol: "TCP", Port: 8080, BackendPort: port}},
		Backends: []api.Backend{{Name: "node-a", Address: ip}},
	})
	if err != nil {
		t.Fatal(err)
	}
	vip := net.JoinHostPort(lb.VIPs[0], "8080")
	if name, err := nettest.AskName(vip); err != nil || name != "node-a" {
		t.Fatalf("before crash: %q %v", name, err)
	}
	// Many acknowledged writes right before the crash.
	for i := range 30 {
		if _, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("burst-%d", i), Zone: "zone-b"}); err != nil {
			t.Fatal(err)
		}
	}
	p.Kill()
	if _, err := nettest.AskName(vip); err == nil {
		t.Fatal("VIP still serves with the cloud dead")
	}

	_, c = startChild(t, dir, octet)
	list, err := c.ListInstances(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 31 {
		t.Fatalf("after restart %d instances, want 31", len(list))
	}
	lbs, err := c.ListLoadBalancers(ctx, "c1")
	if err != nil || len(lbs) != 1 || lbs[0].VIPs[0] != lb.VIPs[0] {
		t.Fatalf("after restart load balancers = %+v %v", lbs, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		name, err := nettest.AskName(vip)
		if err == nil && name == "node-a" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("load balancer does not serve after restart: %q %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// New allocations do not reuse what was taken before the crash.
	n, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "after", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.ID == n.ID || i.Addresses[0].Address == n.Addresses[0].Address {
			t.Fatalf("new instance %+v collides with %+v", n, i)
		}
	}
}
