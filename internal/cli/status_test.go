package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/devenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestPrintStatus(t *testing.T) {
	rep := &devenv.Report{PID: 1, DataDir: "/d",
		Nodes: []devenv.NodeStatus{
			{Name: "node-1", Zone: "zone-a", ProviderID: "local://i-1", InternalIP: "127.1.0.2", Initialized: true,
				PodCIDRs: []string{"10.244.0.0/24"}, Route: "routed"},
			{Name: "stray", Reason: "uninitialized taint still set; last warning: InstanceNotFound: no instance"},
		},
		LoadBalancers: []devenv.LBStatus{{Name: "lb1", Service: "demo/hello", VIPs: []string{"127.250.0.2"}, Ports: []string{"8080/TCP"}, State: "active",
			Backends: []api.BackendHealth{{Name: "node-1", Healthy: true}, {Name: "node-2", LastError: "connection refused"}}},
			{Name: "lb2", Service: "demo/fast", VIPs: []string{"198.18.1.2"}, Ports: []string{"80/TCP"}, State: "active", Path: devenv.LBPathKernel,
				Backends: []api.BackendHealth{{Name: "node-1", Healthy: true}}}},
	}
	var b bytes.Buffer
	if err := printStatus(&b, rep, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"node-1  zone-a  127.1.0.2    local://i-1  10.244.0.0/24  routed  yes",
		"stray   -       -            -            -              -       no: uninitialized taint still set; last warning: InstanceNotFound",
		"demo/hello  127.250.0.2  8080/TCP  active                1/2 healthy (node-2 unhealthy: connection refused)",
		"demo/fast   198.18.1.2   80/TCP    active (kernel path)  1/1 healthy",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := printStatus(&b, rep, "json"); err != nil {
		t.Fatal(err)
	}
	var back devenv.Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Nodes) != 2 || len(back.LoadBalancers[0].Backends) != 2 {
		t.Errorf("json round trip: %v %+v", err, back)
	}
	if err := printStatus(&b, rep, "yaml"); err == nil || !strings.Contains(err.Error(), "use table or json") {
		t.Errorf("unsupported output: %v", err)
	}
}

// A 200-node load balancer stays on one line in the table.
func TestBackendsSummaryIsShort(t *testing.T) {
	lb := devenv.LBStatus{}
	for i := range 200 {
		lb.Backends = append(lb.Backends, api.BackendHealth{Name: fmt.Sprintf("node-%d", i+1), Healthy: true})
	}
	if got, want := backends(lb), "200/200 healthy (node-1, node-2, node-3, node-4, node-5, … 195 more)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
