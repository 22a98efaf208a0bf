package devenv

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/portside-io/portside/internal/localcloud/vpc"
)

// IP families of --ip-family.
const (
	IPFamilyIPv4 = "ipv4"
	IPFamilyDual = "dual"
	IPFamilyIPv6 = "ipv6"
)

// checkIPFamily says what is wrong with --ip-family for the node mode
// chosen: dual-stack and IPv6-only clusters run on real nodes (their VPC
// carries both families; simulated nodes' IPv6 VIPs would need a route on
// the host).
func checkIPFamily(family, mode string) error {
	switch family {
	case "", IPFamilyIPv4:
		return nil
	case IPFamilyDual, IPFamilyIPv6:
		if mode != NodeModeReal {
			return fmt.Errorf("--ip-family=%s runs on real nodes (their VPC carries both families): use --node-mode=real (or auto on a machine that allows real nodes), or --ip-family=ipv4", family)
		}
		return nil
	}
	return fmt.Errorf("--ip-family %q: want ipv4, dual or ipv6", family)
}

// realNetwork6 is a dual-stack environment's IPv6 plan: a /48 of the
// unique local range fd00::/8 with a global ID from the data directory's
// path (RFC 4193's random ID, made stable per environment), never the
// machine's own fd00::/64: its first /64 the machines' subnet, a /112 the
// VIPs, a /56 the pod CIDRs (a /64 per node), a /112 the Services and a
// /126 the host↔router uplink.
func realNetwork6(block netip.Prefix) realNetwork {
	at := func(sub uint16, bits int) netip.Prefix {
		a := block.Masked().Addr().As16()
		a[6], a[7] = byte(sub>>8), byte(sub)
		return netip.PrefixFrom(netip.AddrFrom16(a), bits)
	}
	return realNetwork{Block6: block.Masked(), Subnet6: at(0, 64), VIPs6: at(1, 112), Pods6: at(0x100, 56), Services6: at(0x200, 112), Uplink6: at(0xffff, 126)}
}

// ula48 is the i-th candidate /48 for a data directory.
func ula48(dir string, i int) netip.Prefix {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s#%d", dir, i)))
	g := sum[:5]
	if g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0 && g[4] == 0 {
		g[4] = 1 // fd00::/48 holds the machine's own fd00::/64
	}
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, g[0], g[1], g[2], g[3], g[4]}), 48)
}

// ensureRealNetwork6 gives n its IPv6 ranges (kept in the data directory
// once chosen): the first candidate /48 nothing on the host uses.
func ensureRealNetwork6(l layout, n *realNetwork) error {
	if n.Block6.IsValid() {
		return nil
	}
	for i := 0; i < 16; i++ {
		b := ula48(l.dir, i)
		free, err := vpc.Unused(b)
		if err != nil {
			return err
		}
		if !free {
			continue
		}
		v6 := realNetwork6(b)
		n.Block6, n.Subnet6, n.VIPs6, n.Pods6, n.Services6, n.Uplink6 = v6.Block6, v6.Subnet6, v6.VIPs6, v6.Pods6, v6.Services6, v6.Uplink6
		data, _ := json.Marshal(n)
		return os.WriteFile(l.realNetworkFile(), append(data, '\n'), 0o644)
	}
	return fmt.Errorf("no IPv6 /48 of fd00::/8 for this environment is free on this host (16 tried)")
}

// cloudArgs6 are cloud serve's flags for the IPv6 half of a dual-stack VPC.
func (n realNetwork) cloudArgs6() []string {
	if !n.Block6.IsValid() {
		return nil
	}
	return []string{"--node-pool-v6=" + n.Subnet6.String(), "--vpc-uplink6=" + n.Uplink6.String(),
		"--vip-pool-v6=" + n.VIPs6.String(), "--vpc-route=" + n.VIPs6.String(), "--vpc-local=" + n.VIPs6.String(),
		"--vpc-route=" + n.Pods6.String(), "--vpc-cover=" + n.Block6.String()}
}

// dualList joins a range of each family as Kubernetes' dual-stack flags
// take them (IPv4 first: the primary family).
func dualList(v4 string, v6 netip.Prefix, dual bool) string {
	if !dual || !v6.IsValid() {
		return v4
	}
	return v4 + "," + v6.String()
}

// firstOfList is the first range of a comma-separated list.
func firstOfList(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return first
}
