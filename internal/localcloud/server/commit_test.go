package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestConcurrentPutDeleteKeepsStoreAndDataPlaneInStep hammers PUT, PUT
// backends and DELETE of the same names from many goroutines, then checks
// that what is stored is what is served: a stored load balancer is active
// and accepts connections on its VIP, a deleted one is not in the data plane.
func TestConcurrentPutDeleteKeepsStoreAndDataPlaneInStep(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	port := 20000 + rand.IntN(10000)
	spec := func(i int) api.LoadBalancerSpec {
		return api.LoadBalancerSpec{Cluster: "c1", Tags: map[string]string{"i": fmt.Sprint(i)},
			Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: 30000 + i%100}},
			Backends:  []api.Backend{{Name: "n", Address: fmt.Sprintf("127.9.0.%d", 1+i%200)}}}
	}
	names := []string{"lb-a", "lb-b", "lb-c"}
	for round := range 5 {
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				for i := range 15 {
					name := names[rng.IntN(len(names))]
					var err error
					switch rng.IntN(3) {
					case 0:
						_, err = c.PutLoadBalancer(ctx, name, spec(i))
					case 1:
						_, err = c.SetBackends(ctx, name, spec(i).Backends)
					default:
						err = c.DeleteLoadBalancer(ctx, name)
					}
					if err != nil && !client.IsNotFound(err) {
						t.Errorf("%s: %v", name, err)
					}
				}
			}()
		}
		wg.Wait()
		for _, name := range names {
			checkInStep(t, srv, c, name)
		}
	}
}

// refusing: every listener is closed because no backend is ready.
func refusing(h api.LoadBalancerHealth) bool {
	if len(h.Listeners) == 0 {
		return false
	}
	for _, l := range h.Listeners {
		if l.Serving || l.LastError != dataplane.RefusingReason {
			return false
		}
	}
	return true
}

func checkInStep(t *testing.T, srv *Server, c *client.Client, name string) {
	t.Helper()
	lb, err := c.GetLoadBalancer(context.Background(), name)
	h, served := srv.plane.Health(name)
	switch {
	case client.IsNotFound(err):
		if served {
			t.Errorf("%s is deleted but served: %+v", name, h)
		}
	case err != nil:
		t.Fatal(err)
	case lb.State != api.LoadBalancerActive:
		t.Errorf("%s is stored %s: %s", name, lb.State, lb.Message)
	case !served || !h.Serving && !refusing(h):
		t.Errorf("%s is stored active but not served (in data plane: %v, %+v)", name, served, h)
	default:
		addr := net.JoinHostPort(lb.VIPs[0], fmt.Sprint(lb.Listeners[0].Port))
		// No backend is up: the listeners are closed on purpose, and
		// health says so; a connection is refused.
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if refusing(h) {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s refuses (no ready backend), but a connection to %s: %v", name, addr, err)
			}
		} else if errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s is stored active on %s but nothing listens there: %v", name, addr, err)
		} else if err == nil {
			_ = conn.Close()
		}
	}
}

// TestBindFailureIsStoredAfterCommit: a listener that cannot bind is
// recorded as the load balancer's error state, in the response and in the
// store, and clears when the port is free again.
func TestBindFailureIsStoredAfterCommit(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	vip := srv.opts.VIPPoolV4.Addr().Next().Next().Next().String()
	blocker, err := net.Listen("tcp", net.JoinHostPort(vip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := blocker.Addr().(*net.TCPAddr).Port
	spec := api.LoadBalancerSpec{Cluster: "c1", RequestedIP: vip,
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: 30080}}}
	lb, err := c.PutLoadBalancer(ctx, "busy", spec)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.GetLoadBalancer(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if lb.State != api.LoadBalancerError || stored.State != api.LoadBalancerError || stored.Message == "" {
		t.Fatalf("with the port taken: response %s, stored %s %q; want error", lb.State, stored.State, stored.Message)
	}
	_ = blocker.Close()
	if lb, err = c.PutLoadBalancer(ctx, "busy", spec); err != nil || lb.State != api.LoadBalancerActive {
		t.Fatalf("with the port free: %+v, %v", lb, err)
	}
	checkInStep(t, srv, c, "busy")
}

// TestMovedVIPIsFreeToBind: a VIP a load balancer gives up is released only
// once it is no longer served, so the next owner binds it.
func TestMovedVIPIsFreeToBind(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	x := srv.opts.VIPPoolV4.Addr().Next().Next().Next()
	y := x.Next()
	port := 20000 + rand.IntN(10000)
	spec := func(ip string) api.LoadBalancerSpec {
		return api.LoadBalancerSpec{Cluster: "c1", RequestedIP: ip,
			Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: port, BackendPort: 30080}}}
	}
	for _, step := range []struct{ name, ip string }{{"a", x.String()}, {"a", y.String()}, {"b", x.String()}} {
		lb, err := c.PutLoadBalancer(ctx, step.name, spec(step.ip))
		if err != nil || lb.State != api.LoadBalancerActive || lb.VIPs[0] != step.ip {
			t.Fatalf("%s on %s: %+v, %v", step.name, step.ip, lb, err)
		}
	}
	checkInStep(t, srv, c, "a")
	checkInStep(t, srv, c, "b")
}
