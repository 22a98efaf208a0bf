package devenv

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/portside-io/portside/internal/manager"
)

// The ranges are chosen once per data directory, kept, and stay clear of
// the 127.10-249 ranges test clouds use, with room for MaxNodes.
func TestLoadNetworkIsKeptAndInRange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "network.json")
	n, c, err := loadNetwork(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(c)
	if !netip.MustParsePrefix("127.250.0.0/15").Contains(n.VIPPool.Addr()) || n.VIPPool.Bits() != 23 {
		t.Errorf("VIP pool %s", n.VIPPool)
	}
	if !netip.MustParsePrefix("127.252.0.0/14").Contains(n.NodePool.Addr()) || n.NodePool.Bits() != 22 || 1<<(32-n.NodePool.Bits()) < MaxNodes+2 {
		t.Errorf("node pool %s", n.NodePool)
	}
	again, c, err := loadNetwork(path, "test")
	releaseAll(c)
	if err != nil || again != n {
		t.Errorf("second load = %+v, %v; want %+v", again, err, n)
	}
}

// ccmArgs must parse with the CCM's real flags, so a renamed flag fails
// here rather than in `portside up`.
func TestCCMArgsParse(t *testing.T) {
	parse := func(args []string) *manager.Options {
		t.Helper()
		if args[0] != "ccm" {
			t.Fatalf("args[0] = %q", args[0])
		}
		o := manager.NewOptions()
		fs := pflag.NewFlagSet("ccm", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(manager.DefaultControllers()); err != nil {
			t.Error(err)
		}
		return o
	}
	o := parse(ccmArgs("/k", "/c", ClusterCIDR, ServiceCIDR, 1, 1))
	if o.CloudProvider != "local" || o.Kubeconfig != "/k" || o.CloudConfig != "/c" || o.LeaderElect || o.SecurePort != 0 {
		t.Errorf("options = %+v", o)
	}
	// Replicas elect a leader, each under its own identity.
	o = parse(ccmArgs("/k", "/c", ClusterCIDR, ServiceCIDR, 2, 2))
	if !o.LeaderElect || !strings.HasPrefix(o.LeaderElectIdentity, "ccm-2_") || o.LeaseDuration != CCMLeaseDuration {
		t.Errorf("replica options = %+v", o)
	}
}

func TestServingAddrFromThisRunOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ccm.log")
	old := `I0101 serving.go:92] "Serving health and metrics" address="https://127.0.0.1:1111"` + "\n"
	writeFile(t, path, old)
	if got := findServingAddr(path, int64(len(old))); got != "" {
		t.Errorf("found %q from an earlier run", got)
	}
	writeFile(t, path, old+strings.Replace(old, "1111", "2222", 1))
	if got := findServingAddr(path, int64(len(old))); got != "https://127.0.0.1:2222" {
		t.Errorf("got %q", got)
	}
}

func TestCompareNodeNames(t *testing.T) {
	names := []string{"node-10", "stray", "node-2", "node-1", "a"}
	slices.SortFunc(names, compareNodeNames)
	if want := []string{"a", "node-1", "node-2", "node-10", "stray"}; !slices.Equal(names, want) {
		t.Errorf("sorted = %v, want %v", names, want)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCCMLeader(t *testing.T) {
	now := time.Now()
	lease := func(holder string, renewed time.Time) *coordinationv1.Lease {
		d := int32(8)
		rt := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cloud-controller-manager"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, RenewTime: &rt}}
	}
	cases := []struct {
		name  string
		lease *coordinationv1.Lease
		want  string
	}{
		{"no Lease (one replica)", nil, ""},
		{"current", lease("ccm-2_12345", now.Add(-2*time.Second)), "ccm-2"},
		{"expired (an earlier run's)", lease("ccm-1_999", now.Add(-time.Minute)), ""},
		{"released", lease("", now), ""},
	}
	for _, tc := range cases {
		client := fake.NewClientset()
		if tc.lease != nil {
			if _, err := client.CoordinationV1().Leases("kube-system").Create(context.Background(), tc.lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := ccmLeader(context.Background(), client, now); got != tc.want {
			t.Errorf("%s: leader %q, want %q", tc.name, got, tc.want)
		}
	}
}
