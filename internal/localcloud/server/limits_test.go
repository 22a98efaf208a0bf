package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// TestDefaultLimitsFitWhatClientsCreate: the defaults never refuse what the
// CCM and the benchmarks create.
func TestDefaultLimitsFitWhatClientsCreate(t *testing.T) {
	l := DefaultLimits()
	lbName := cloud.LoadBalancerName(types.UID("0b6a5a4e-3f5c-4d3e-9a4e-8a1d2e3f4a5b"))
	routeName := "0b6a5a4e-3f5c-4d3e-9a4e-8a1d2e3f4a5b-ipv6" // node UID + family
	for _, c := range []struct {
		what       string
		need, have int
	}{
		{"backends: 5000 nodes, dual-stack", 2 * 5000, l.BackendsPerLB},
		{"routes: 5000 nodes, dual-stack", 2 * 5000, l.Routes},
		{"instances: 5000 nodes", 5000, l.Instances},
		{"load balancers: 1000 services", 1000, l.LoadBalancers},
		{"volumes: 1000 PVs", 1000, l.Volumes},
		{"CCM load balancer name", len(lbName), l.LBNameLen},
		{"CCM route name", len(routeName), l.RouteNameLen},
		{"node names (DNS subdomains)", 253, l.InstanceNameLen},
		{"PV names (DNS subdomains)", 253, l.VolumeNameLen},
		{"CCM tags per load balancer", 4, l.TagsPerObject},
		{"service-name tag: namespace/name", 63 + 1 + 253, l.TagValueLen},
	} {
		if c.have < c.need {
			t.Errorf("%s: need %d, limit is %d", c.what, c.need, c.have)
		}
	}
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	lbSpec := func(mod func(*api.LoadBalancerSpec)) api.LoadBalancerSpec {
		s := api.LoadBalancerSpec{Cluster: "c1", Listeners: []api.Listener{{Protocol: api.ProtocolTCP, Port: 80, BackendPort: 30080}}}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	listeners := func(n int) []api.Listener {
		var out []api.Listener
		for i := range n {
			out = append(out, api.Listener{Protocol: api.ProtocolTCP, Port: 1000 + i, BackendPort: 30000 + i})
		}
		return out
	}
	backends := func(n int) []api.Backend {
		out := make([]api.Backend, n)
		for i := range out {
			out[i] = api.Backend{Name: fmt.Sprint("n", i), Address: fmt.Sprintf("127.8.%d.%d", i/250, 1+i%250)}
		}
		return out
	}
	tags := func(n int) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[fmt.Sprint("k", i)] = "v"
		}
		return out
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	// Totals are tested with a limit of 2: creating a third fails.
	small := DefaultLimits()
	small.LoadBalancers, small.Routes, small.Instances, small.Volumes, small.Registries = 2, 2, 2, 2, 2
	small.ListenersPerLB, small.BackendsPerLB = 3, 3

	cases := []struct {
		name   string
		limits *Limits
		// do makes the request; before it, up to the limit succeeds.
		do     func(c *client.Client, i int) error
		status int
		want   string
	}{
		{name: "load balancer name", status: 400, want: "load balancer name is 64 characters long: the limit is 63",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, long(64), lbSpec(nil))
				return err
			}},
		{name: "listeners per load balancer", status: 400, want: "listeners has 101 items: the limit is 100",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Listeners = listeners(101) }))
				return err
			}},
		{name: "backends per load balancer", status: 400, want: "backends has 10001 items: the limit is 10000",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Backends = backends(10001) }))
				return err
			}},
		{name: "backends per load balancer, set alone", limits: &small, status: 400, want: "backends has 4 items: the limit is 3",
			do: func(c *client.Client, _ int) error {
				if _, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Backends = backends(3) })); err != nil {
					return err
				}
				_, err := c.SetBackends(ctx, "lb", backends(4))
				return err
			}},
		{name: "source ranges", status: 400, want: "sourceRanges has 1001 items: the limit is 1000",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.SourceRanges = make([]string, 1001) }))
				return err
			}},
		{name: "tags per load balancer", status: 400, want: "tags has 51 items: the limit is 50",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Tags = tags(51) }))
				return err
			}},
		{name: "tag key", status: 400, want: "is 254 characters long: the limit is 253",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Tags = map[string]string{long(254): "v"} }))
				return err
			}},
		{name: "tag value", status: 400, want: "is 1025 characters long: the limit is 1024",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Tags = map[string]string{"k": long(1025)} }))
				return err
			}},
		{name: "cluster name", status: 400, want: "cluster is 254 characters long: the limit is 253",
			do: func(c *client.Client, _ int) error {
				_, err := c.PutLoadBalancer(ctx, "lb", lbSpec(func(s *api.LoadBalancerSpec) { s.Cluster = long(254) }))
				return err
			}},
		{name: "instance labels", status: 400, want: "labels has 51 items: the limit is 50",
			do: func(c *client.Client, _ int) error {
				_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "n", Zone: "zone-a", Labels: tags(51)})
				return err
			}},
		{name: "instance name", status: 400, want: "instance name is 254 characters long: the limit is 253",
			do: func(c *client.Client, _ int) error {
				_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: long(254), Zone: "zone-a"})
				return err
			}},
		{name: "route name", status: 400, want: "route name is 254 characters long: the limit is 253",
			do: func(c *client.Client, _ int) error {
				_, err := c.CreateRoute(ctx, api.Route{Cluster: "c1", Name: long(254), TargetNode: "n", DestinationCIDR: "10.0.0.0/24"})
				return err
			}},
		{name: "volume name", status: 400, want: "volume name is 254 characters long: the limit is 253",
			do: func(c *client.Client, _ int) error {
				_, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: long(254), Zones: []string{"zone-a"}, SizeGiB: 1})
				return err
			}},
		{name: "load balancers", limits: &small, status: 422, want: "the cloud holds 2 load balancers and the limit is 2",
			do: func(c *client.Client, i int) error {
				if i == 2 { // replacing an existing one at the limit is fine
					if _, err := c.PutLoadBalancer(ctx, "lb-0", lbSpec(nil)); err != nil {
						return err
					}
				}
				_, err := c.PutLoadBalancer(ctx, fmt.Sprint("lb-", i), lbSpec(func(s *api.LoadBalancerSpec) { s.Listeners[0].Port = 8000 + i }))
				return err
			}},
		{name: "routes", limits: &small, status: 422, want: "the cloud holds 2 routes and the limit is 2",
			do: func(c *client.Client, i int) error {
				if i == 0 {
					if _, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: "n", Zone: "zone-a"}); err != nil {
						return err
					}
				}
				_, err := c.CreateRoute(ctx, api.Route{Cluster: "c1", Name: fmt.Sprint("r-", i), TargetNode: "n", DestinationCIDR: fmt.Sprintf("10.%d.0.0/24", i)})
				return err
			}},
		{name: "instances", limits: &small, status: 422, want: "the cloud holds 2 instances and the limit is 2",
			do: func(c *client.Client, i int) error {
				_, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprint("n-", i), Zone: "zone-a"})
				return err
			}},
		{name: "volumes", limits: &small, status: 422, want: "the cloud holds 2 volumes and the limit is 2",
			do: func(c *client.Client, i int) error {
				_, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: fmt.Sprint("v-", i), Zones: []string{"zone-a"}, SizeGiB: 1})
				return err
			}},
		{name: "registries", limits: &small, status: 422, want: "the cloud holds 2 registries and the limit is 2",
			do: func(c *client.Client, i int) error {
				_, err := c.CreateRegistry(ctx, fmt.Sprintf("r%d.example.com", i))
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := startServer(t)
			if tc.limits != nil {
				srv.opts.Limits = tc.limits
			}
			var err error
			for i := 0; err == nil && i < 3; i++ {
				err = tc.do(c, i)
				if err != nil && tc.limits != nil && i < 2 && tc.status == 422 {
					t.Fatalf("request %d, below the limit: %v", i, err)
				}
			}
			var se *client.StatusError
			if !errors.As(err, &se) || se.Status != tc.status || !strings.Contains(se.Message, tc.want) {
				t.Fatalf("got %v, want %d saying %q", err, tc.status, tc.want)
			}
			if want := map[int]string{400: "Invalid", 422: "LimitExceeded"}[tc.status]; se.Code != want {
				t.Errorf("code %q, want %q", se.Code, want)
			}
			if tc.status == http.StatusUnprocessableEntity && !strings.Contains(se.Message, "delete some") {
				t.Errorf("message %q does not say what to do", se.Message)
			}
		})
	}
}
