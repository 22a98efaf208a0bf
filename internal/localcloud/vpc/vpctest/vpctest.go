// Package vpctest gives tests a VPC of their own: ranges no other test (or
// the host) uses at the same time, removed when the test ends, on success
// and on failure.
package vpctest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/testskip"
)

// Ranges is one test VPC's address plan: a /22 of 198.19.0.0/16 (in
// 198.18.0.0/15, reserved for benchmarking, never routed on the internet) split into the machines'
// subnet, VIPs and the uplink, and a /20 of 10.208.0.0/12 for pod CIDRs
// (apart from the ranges `portside up` takes: 10.224.0.0/11 for pods and
// 10.96.0.0/12 for Services, so tests run beside a real-node `up`).
//
// The IPv6 ranges (for ConfigDual) are a random /48 of the unique local
// range fd00::/8 (RFC 4193: a random global ID, so it never equals the
// host's fd00::/64): its first /64 the machines' subnet, a /112 the VIPs,
// a /56 the pod CIDRs and a /126 the uplink.
type Ranges struct {
	Block, Subnet, VIPs, Uplink, Pods      netip.Prefix
	Block6, Subnet6, VIPs6, Uplink6, Pods6 netip.Prefix
}

// Pick chooses ranges at random; a clash with another test is caught by
// vpc.Up (its cover routes are refused) and Start picks again.
func Pick() Ranges {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := binary.BigEndian.Uint32(b[:])
	// 63 of the 64 /22s in 198.19.0.0/16, apart from real-node `up`s (which
	// may run beside: TestUpRealNodes, test/realnode's own): their VPCs
	// take /22s of 198.18.0.0/16 and their uplinks 198.19.255.0/24, in the
	// last /22, which is left out. 256 /20s in 10.208.0.0/12.
	i, j := n%63, (n/64)%256
	base := netip.AddrFrom4([4]byte{198, 19, byte(i * 4), 0})
	pods := netip.AddrFrom4([4]byte{10, 208 + byte(j/16), byte((j % 16) * 16), 0})
	at := func(third, fourth byte, bits int) netip.Prefix {
		a := base.As4()
		a[2] += third
		a[3] = fourth
		return netip.PrefixFrom(netip.AddrFrom4(a), bits)
	}
	var g [5]byte
	_, _ = rand.Read(g[:])
	if g == [5]byte{} {
		g[4] = 1 // never fd00::/48, which holds the host's fd00::/64
	}
	at6 := func(sub uint16, host byte, bits int) netip.Prefix {
		a := [16]byte{0xfd, g[0], g[1], g[2], g[3], g[4], byte(sub >> 8), byte(sub)}
		a[15] = host
		return netip.PrefixFrom(netip.AddrFrom16(a), bits)
	}
	return Ranges{
		Block:  netip.PrefixFrom(base, 22),
		Subnet: at(0, 0, 24),
		VIPs:   at(1, 0, 24),
		Uplink: at(3, 252, 30),
		Pods:   netip.PrefixFrom(pods, 20),

		Block6:  at6(0, 0, 48),
		Subnet6: at6(0, 0, 64),
		VIPs6:   at6(1, 0, 112),
		Pods6:   at6(0x100, 0, 56),
		Uplink6: at6(0xffff, 0, 126),
	}
}

// Config is a vpc.Config for r.
func (r Ranges) Config(id, stateFile string) vpc.Config {
	return vpc.Config{
		ID:      id,
		Subnet:  vpc.Range{Prefix: r.Subnet, Flag: "subnet"},
		Uplink:  vpc.Range{Prefix: r.Uplink, Flag: "uplink"},
		Routed:  []vpc.Range{{Prefix: r.VIPs, Flag: "vips"}, {Prefix: r.Pods, Flag: "pods"}},
		Covered: []vpc.Range{{Prefix: r.Block, Flag: "block"}, {Prefix: r.Pods, Flag: "pods"}},
		// The router owns the VIPs whole, as `up` has it do.
		Local:     []vpc.Range{{Prefix: r.VIPs, Flag: "vips"}},
		StateFile: stateFile,
	}
}

// ConfigDual is r.Config with the IPv6 ranges too: a dual-stack VPC.
func (r Ranges) ConfigDual(id, stateFile string) vpc.Config {
	c := r.Config(id, stateFile)
	c.Subnet6 = vpc.Range{Prefix: r.Subnet6, Flag: "subnet6"}
	c.Uplink6 = vpc.Range{Prefix: r.Uplink6, Flag: "uplink6"}
	c.Routed = append(c.Routed, vpc.Range{Prefix: r.VIPs6, Flag: "vips6"}, vpc.Range{Prefix: r.Pods6, Flag: "pods6"})
	c.Covered = append(c.Covered, vpc.Range{Prefix: r.Block6, Flag: "block6"})
	// The router owns the IPv6 VIPs whole, as `up` has it do.
	c.Local = append(c.Local, vpc.Range{Prefix: r.VIPs6, Flag: "vips6"})
	return c
}

// RequireRoot ends the test (skip locally, fail under CI) where real
// namespaces cannot be made.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testskip.Unavailable(t, "real network namespaces need root: run the tests as root (sudo -E go test ...)")
	}
	for _, tool := range []string{"ip", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			testskip.Unavailable(t, "%s not found: install iproute2 and util-linux", tool)
		}
	}
}

// Start brings up a VPC of the test's own and takes it down at the end.
func Start(t testing.TB) (*vpc.Network, Ranges) {
	t.Helper()
	return start(t, Ranges.Config)
}

// StartDual is Start with a dual-stack VPC.
func StartDual(t testing.TB) (*vpc.Network, Ranges) {
	t.Helper()
	return start(t, Ranges.ConfigDual)
}

func start(t testing.TB, config func(Ranges, string, string) vpc.Config) (*vpc.Network, Ranges) {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		r := Pick()
		id := vpc.IDFor(fmt.Sprintf("%s/%d", dir, attempt))
		state := filepath.Join(dir, fmt.Sprintf("vpc-%d.json", attempt))
		nw, err := vpc.Up(context.Background(), config(r, id, state))
		if err == nil {
			t.Cleanup(func() {
				if err := vpc.Down(context.Background(), state); err != nil {
					t.Errorf("vpc down: %v", err)
				}
			})
			return nw, r
		}
		if attempt >= 5 || !(strings.Contains(err.Error(), "overlaps") || strings.Contains(err.Error(), "File exists")) {
			t.Fatalf("vpc up: %v", err)
		}
	}
}
