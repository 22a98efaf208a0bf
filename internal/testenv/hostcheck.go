package testenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/vpc"
)

// EnvironmentMarks are strings every kernel object of the environment's
// real machines carries: its VPC's ID (links, namespaces, cgroups) and its
// subnet (addresses, routes).
func EnvironmentMarks(t *testing.T, data string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "real-network.json"))
	if err != nil {
		t.Fatal(err)
	}
	var n struct{ Subnet, Pods, Services, Block6 string }
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(data, "cloud", "machines"))
	if err != nil {
		t.Fatal(err)
	}
	subnet := n.Subnet[:strings.LastIndex(n.Subnet, ".")+1]
	// The environment's own pod and Service ranges (a /16 each).
	pods, svcs := n.Pods[:strings.Index(n.Pods, ".0.0/")+1], n.Services[:strings.Index(n.Services, ".0.0/")+1]
	marks := []string{"ps" + vpc.IDFor(abs), "ps-" + vpc.IDFor(abs), subnet, pods, svcs}
	if n.Block6 != "" {
		// A dual-stack environment's ULA /48: every IPv6 range of it.
		marks = append(marks, strings.TrimSuffix(n.Block6, "::/48"))
	}
	return marks
}

func CheckHostAsFound(t *testing.T, when string, before hostsnap.Snapshot, mine []string) {
	t.Helper()
	after, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	if d := hostsnap.Diff(before.Mentioning(mine...), after.Mentioning(mine...)); d != "" {
		t.Errorf("%s: the host differs:\n%s", when, d)
	}
	whole := func(s hostsnap.Snapshot) hostsnap.Snapshot {
		return hostsnap.Snapshot{"sysctl": s["sysctl"], "nft": s["nft"], "iptables-save": s["iptables-save"], "ip6tables-save": s["ip6tables-save"]}
	}
	if d := hostsnap.Diff(whole(before), whole(after)); d != "" {
		t.Errorf("%s: host sysctls or firewall rules changed:\n%s", when, d)
	}
}
