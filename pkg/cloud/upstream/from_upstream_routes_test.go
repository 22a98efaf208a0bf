package upstream

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// One route with a destination that does not parse is skipped with a log
// line, as RouteController.isResponsibleForRoute does, and does not stop
// the others; one with leading zeros parses as upstream's
// netutils.ParseCIDRSloppy does, and is deleted by the provider's own
// spelling (upstream hands DeleteRoute the listed route).
func TestFromUpstreamListRoutesSkipsUnparsable(t *testing.T) {
	f := &fake.Cloud{RouteMap: map[string]*fake.Route{
		"good":  {ClusterName: "c1", Route: cloudprovider.Route{Name: "good", TargetNode: "node-a", DestinationCIDR: "10.244.1.0/24"}},
		"bad":   {ClusterName: "c1", Route: cloudprovider.Route{Name: "bad", TargetNode: "node-b", DestinationCIDR: "10.244.2.0/33"}},
		"zeros": {ClusterName: "c1", Route: cloudprovider.Route{Name: "zeros", TargetNode: "node-c", DestinationCIDR: "010.244.003.000/24"}},
	}}
	var buf bytes.Buffer
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf))))
	r, _ := FromUpstream(f).Routes()
	list, err := r.ListRoutes(ctx, "c1")
	if err != nil {
		t.Fatalf("one bad route must not fail the list: %v", err)
	}
	got := map[string]netip.Prefix{}
	for _, rt := range list {
		got[rt.Name] = rt.DestinationCIDR
	}
	if len(got) != 2 || got["good"] != netip.MustParsePrefix("10.244.1.0/24") || got["zeros"] != netip.MustParsePrefix("10.244.3.0/24") {
		t.Fatalf("routes = %v", got)
	}
	if logs := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(logs) != 1 || !strings.Contains(logs[0], `route="bad"`) || !strings.Contains(logs[0], "10.244.2.0/33") {
		t.Fatalf("want one log line naming the bad route, got %q", logs)
	}
	for _, rt := range list {
		if rt.Name == "zeros" {
			if err := r.DeleteRoute(ctx, "c1", rt); err != nil {
				t.Fatalf("delete by the listed spelling: %v", err)
			}
		}
	}
	if _, ok := f.RouteMap["zeros"]; ok {
		t.Fatal("route not deleted")
	}
}
