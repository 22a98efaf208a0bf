package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestStoppedInstanceFailsHealthChecks: stopping an instance takes its
// backends out of rotation, also after a restart of the cloud; starting it
// brings them back; deleting it frees its address for a new instance.
func TestStoppedInstanceFailsHealthChecks(t *testing.T) {
	dir := t.TempDir()
	octet := 10 + rand.IntN(240)
	opts := Options{Token: "t", VIPPoolV4: netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", octet)),
		NodePoolV4: netip.MustParsePrefix(fmt.Sprintf("127.%d.1.0/24", octet)),
		DataPlane:  dataplane.Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 300 * time.Millisecond}}
	open := func() (*Server, *client.Client, func()) {
		s, err := New(context.Background(), filepath.Join(dir, StateFile), opts)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		return s, client.New(hs.URL, "t"), func() { hs.Close(); s.Close() }
	}
	s, c, closeCloud := open()
	defer func() { closeCloud() }()
	ctx := context.Background()
	inst, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "n1", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(inst.Addresses[0].Address, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	if _, err := c.PutLoadBalancer(ctx, "lb", api.LoadBalancerSpec{Cluster: "c",
		Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 8080, BackendPort: ln.Addr().(*net.TCPAddr).Port}},
		Backends:  []api.Backend{{Name: "n1", Address: inst.Addresses[0].Address}}}); err != nil {
		t.Fatal(err)
	}
	healthy := func(s *Server) bool {
		h, ok := s.plane.Health("lb")
		return ok && len(h.Backends) == 1 && h.Backends[0].Healthy && !h.Backends[0].LastChecked.IsZero()
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("backend healthy", func() bool { return healthy(s) })
	if _, err := c.StopInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	wait("backend unhealthy once the instance stopped", func() bool { return !healthy(s) })

	closeCloud()
	s, c, closeCloud = open()
	// A restarted cloud's backends start healthy and only a check can mark
	// them otherwise, so the proof is a check that ran after the restart and
	// found the instance stopped (its listener still answers: a check that
	// did not know would pass), then the backend out of rotation.
	var h api.BackendHealth
	wait("a health check after the restart", func() bool {
		lh, ok := s.plane.Health("lb")
		if ok && len(lh.Backends) == 1 {
			h = lh.Backends[0]
		}
		return !h.LastChecked.IsZero()
	})
	if !strings.Contains(h.LastError, "instance is stopped") {
		t.Fatalf("after a restart, a check of the stopped instance's backend got %q, want the stopped instance's error", h.LastError)
	}
	wait("backend unhealthy after the restart", func() bool { return !healthy(s) })
	if _, err := c.StartInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	wait("backend healthy once the instance started", func() bool { return healthy(s) })

	if _, err := c.StopInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	wait("backend unhealthy once stopped again", func() bool { return !healthy(s) })
	if err := c.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	// The address is free for another instance; a stale mark must not
	// keep that one out of rotation.
	wait("the deleted instance's address no longer marked stopped", func() bool {
		return !s.planePoweredOff(inst.Addresses[0].Address)
	})
}
