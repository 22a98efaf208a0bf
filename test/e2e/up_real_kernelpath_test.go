package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// kernelPathServes: on real nodes the demo's load balancer is served by the
// VPC router's kernel path, not the proxy: its listener says so, and a
// connection held open through the VIP, answered by a real pod, is not
// one of the proxy's (its listener counts no open connection), while the
// backend's health checks go on. Red with `cloud serve
// --lb-kernel-path=false` (the proxy then holds the connection).
func kernelPathServes(t *testing.T, data string) {
	t.Helper()
	cc := upCloudClient(t, data)
	ctx := context.Background()
	var lb string
	var listener api.ListenerHealth
	waitUntil(t, 60*time.Second, "a proxied TCP listener of the demo's load balancer on the kernel path", func() bool {
		lbs, err := cc.ListLoadBalancers(ctx, "")
		if err != nil {
			return false
		}
		for _, l := range lbs {
			h, err := cc.LoadBalancerHealth(ctx, l.Name)
			if err != nil {
				continue
			}
			for _, ls := range h.Listeners {
				if ls.Protocol == api.ProtocolTCP && ls.Kernel && ls.KernelError == "" {
					lb, listener = l.Name, ls
					return true
				}
			}
		}
		return false
	})
	c, err := net.DialTimeout("tcp", listener.Address, 5*time.Second)
	if err != nil {
		t.Fatalf("dialing the VIP %s: %v", listener.Address, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /hostname HTTP/1.1\r\nHost: %s\r\n\r\n", listener.Address); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("through the VIP %s: %v", listener.Address, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("through the VIP %s: %s", listener.Address, resp.Status)
	}
	// The connection is open (kept alive): the proxy would count it.
	h, err := cc.LoadBalancerHealth(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	for _, ls := range h.Listeners {
		if ls.Address == listener.Address && ls.Protocol == listener.Protocol {
			if !ls.Kernel || ls.Active != 0 {
				t.Errorf("listener %s with a connection open through the VIP: kernel %v, %d open in the proxy; want the kernel path and none in the proxy", ls.Address, ls.Kernel, ls.Active)
			}
		}
	}
	healthy := 0
	for _, be := range h.Backends {
		if be.Healthy {
			healthy++
		}
	}
	if healthy == 0 {
		t.Errorf("load balancer %s: no healthy backend while the kernel path serves (%+v)", lb, h.Backends)
	}
}
