// Package localcloudtest starts an in-process local cloud for tests, on its
// own loopback ranges so that test packages running at the same time never
// collide on VIPs or node addresses.
package localcloudtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// Cloud is a running test cloud.
type Cloud struct {
	Server   *server.Server
	Client   *client.Client
	Endpoint string
	Token    string
	// ViewerToken logs in to the web console read-only.
	ViewerToken string
	// RegistryHost is the served OCI registry's host:port (plain HTTP on
	// loopback); credentials from Client.Credential for it pull (and, with
	// Push, push).
	RegistryHost string
	// VIPPool and NodePool are this cloud's loopback ranges.
	VIPPool, NodePool netip.Prefix
}

// Start runs a cloud until the test ends. Health checks run every 100 ms so
// tests see backend changes quickly.
func Start(t testing.TB) *Cloud {
	t.Helper()
	c, stop, err := StartDetached(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c
}

// StartDetached runs a cloud with its state in dir until stop is called,
// for fixtures shared by a whole test package.
func StartDetached(dir string) (c *Cloud, stop func(), err error) {
	return StartWith(dir, dataplane.Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 300 * time.Millisecond, DrainTimeout: time.Second})
}

// StartWith is StartDetached with data-plane options of the caller's.
func StartWith(dir string, dp dataplane.Options) (c *Cloud, stop func(), err error) {
	return start(dir, dp, false)
}

// StartWithManyVIPs is StartWith with the whole lower half of its /16 for
// VIPs (32k instead of 4k), for benchmarks of 10,000 load balancers.
func StartWithManyVIPs(dir string, dp dataplane.Options) (c *Cloud, stop func(), err error) {
	return start(dir, dp, true)
}

func start(dir string, dp dataplane.Options, manyVIPs bool) (c *Cloud, stop func(), err error) {
	// 127.<o>.0.0/16: VIPs in one random /20 of the lower half (4k, enough
	// for 1,000-Service benchmarks), nodes in the upper half (32k).
	octet := 10 + rand.IntN(240)
	c = &Cloud{
		Token:       fmt.Sprintf("test-%d", rand.Int64()),
		ViewerToken: fmt.Sprintf("viewer-%d", rand.Int64()),
		VIPPool:     netip.MustParsePrefix(fmt.Sprintf("127.%d.%d.0/20", octet, rand.IntN(8)*16)),
		NodePool:    netip.MustParsePrefix(fmt.Sprintf("127.%d.128.0/17", octet)),
	}
	if manyVIPs {
		c.VIPPool = netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/17", octet))
	}
	srv, err := server.New(context.Background(), filepath.Join(dir, server.StateFile), server.Options{
		Token: c.Token, ViewerToken: c.ViewerToken, VIPPoolV4: c.VIPPool, NodePoolV4: c.NodePool, DataPlane: dp,
	})
	if err != nil {
		return nil, nil, err
	}
	rs := httptest.NewUnstartedServer(nil)
	c.RegistryHost = rs.Listener.Addr().String()
	if rs.Config.Handler, err = srv.ServeRegistry(c.RegistryHost); err != nil {
		rs.Close()
		srv.Close()
		return nil, nil, err
	}
	rs.Start()
	hs := httptest.NewServer(srv.Handler())
	c.Server, c.Endpoint = srv, hs.URL
	c.Client = client.New(hs.URL, c.Token)
	return c, func() {
		hs.Close()
		rs.Close()
		srv.Close()
	}, nil
}
