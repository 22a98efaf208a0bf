package devenv

import (
	"strings"
	"testing"
)

// TestNthAddr: the index-th address of a range, kubeadm's 10th for the DNS
// Service among them; an index beyond the range is refused.
func TestNthAddr(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		index  int
		want   string // "" for an error
	}{
		{"10.96.0.0/16", 10, "10.96.0.10"},
		{"10.96.0.0/12", 10, "10.96.0.10"},
		{"10.96.5.7/16", 10, "10.96.0.10"}, // masked first
		{"10.96.0.0/24", 0, "10.96.0.0"},
		{"10.96.0.0/24", 255, "10.96.0.255"},
		{"10.96.0.0/24", 256, ""},
		{"10.96.0.0/29", 10, ""},
		{"fd00:10:96::/112", 10, "fd00:10:96::a"},
		{"10.96.0.0/24", -1, ""},
		{"not a prefix", 10, ""},
	} {
		got, err := nthAddr(tc.prefix, tc.index)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("nthAddr(%q, %d) = %s, want an error", tc.prefix, tc.index, got)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("nthAddr(%q, %d) = %s, %v; want %s", tc.prefix, tc.index, got, err, tc.want)
		}
	}
	env := &environment{}
	if got := env.clusterDNS(); got != "10.96.0.10" {
		t.Errorf("clusterDNS() = %s, want 10.96.0.10 of ServiceCIDR %s", got, ServiceCIDR)
	}
}

// TestCorefile: kubeadm's plugins, answering only the cluster's zones and
// forwarding nowhere (no upstream DNS may be reached from here).
func TestCorefile(t *testing.T) {
	c := corefile("cluster.local")
	for _, want := range []string{"cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {", "errors", "health {", "lameduck 5s", "ready",
		"kubernetes cluster.local in-addr.arpa ip6.arpa {", "pods insecure", "ttl 30", "prometheus :9153",
		"cache 30 {", "disable success cluster.local", "disable denial cluster.local", "reload", "loadbalance"} {
		if !strings.Contains(c, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, c)
		}
	}
	for _, bad := range []string{"forward", "loop", "fallthrough", ".:53"} {
		if strings.Contains(c, bad) {
			t.Errorf("Corefile has %q:\n%s", bad, c)
		}
	}
}
