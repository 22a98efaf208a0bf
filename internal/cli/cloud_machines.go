package cli

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/portside-io/portside/internal/localcloud/hypervisor"
	"github.com/portside-io/portside/internal/localcloud/vpc"
)

// machineFlags are `cloud serve`'s flags for real machines.
type machineFlags struct {
	mode          string
	uplink        string
	uplink6       string
	routed, cover []string
	local         []string
	expose        []string
}

func (m *machineFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&m.mode, "machines", "none", "none: instances are records; real: instances created with user data boot as real machines (network and mount namespaces, nested cgroups) in the cloud's VPC, whose subnet is --node-pool (needs root)")
	fl.StringVar(&m.uplink, "vpc-uplink", "", "with --machines=real: the host↔VPC-router link, an IPv4 /30 inside a --vpc-cover range")
	fl.StringVar(&m.uplink6, "vpc-uplink6", "", "with --machines=real: makes the VPC dual-stack: the host↔router link's IPv6 prefix (a /64 to /126 inside a --vpc-cover range); the machines' IPv6 subnet is then --node-pool-v6 (a /64 to /120, covered too), and instances created with ipv6 get an address of each family")
	fl.StringSliceVar(&m.routed, "vpc-route", nil, "with --machines=real: more ranges the host sends into the VPC (pod CIDRs, VIPs); repeatable")
	fl.StringSliceVar(&m.local, "vpc-local", nil, "with --machines=real: a --vpc-route range the VPC router owns whole (the load balancers' VIPs, which the cloud then serves in the router, for the host and the machines alike); repeatable")
	fl.StringSliceVar(&m.expose, "vpc-expose", nil, "with --machines=real: <port>=<host:port> serves a loopback service of the host to the machines at the VPC gateway's port (kube-apiserver, say); repeatable")
	fl.StringSliceVar(&m.cover, "vpc-cover", nil, "with --machines=real: ranges covered by unreachable routes on the host, so no packet for them leaves the machine; they must contain --node-pool, --vpc-uplink and every --vpc-route; repeatable")
}

// options turns the flags into the hypervisor's options (nil: none).
func (m *machineFlags) options(dataDir string, nodePool, nodePool6 netip.Prefix) (*hypervisor.Options, error) {
	switch m.mode {
	case "", "none":
		return nil, nil
	case "real":
	default:
		return nil, fmt.Errorf("--machines %q: want none or real", m.mode)
	}
	up, err := netip.ParsePrefix(m.uplink)
	if err != nil {
		return nil, fmt.Errorf("--vpc-uplink %q: want an IPv4 /30 such as 198.18.3.252/30 (required with --machines=real)", m.uplink)
	}
	parse := func(flag string, vals []string) ([]vpc.Range, error) {
		var out []vpc.Range
		for _, v := range vals {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("%s %q is not a CIDR", flag, v)
			}
			out = append(out, vpc.Range{Prefix: p, Flag: flag})
		}
		return out, nil
	}
	routed, err := parse("--vpc-route", m.routed)
	if err != nil {
		return nil, err
	}
	cover, err := parse("--vpc-cover", m.cover)
	if err != nil {
		return nil, err
	}
	local, err := parse("--vpc-local", m.local)
	if err != nil {
		return nil, err
	}
	if len(cover) == 0 {
		return nil, fmt.Errorf("--vpc-cover is required with --machines=real: name the ranges to cover with unreachable routes (at least --node-pool %s and --vpc-uplink %s)", nodePool, up)
	}
	var expose []hypervisor.Exposure
	for _, e := range m.expose {
		port, target, ok := strings.Cut(e, "=")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || n < 1 || n > 65535 || target == "" {
			return nil, fmt.Errorf("--vpc-expose %q: want <gateway port>=<host:port>, e.g. 6443=127.0.0.1:41647", e)
		}
		expose = append(expose, hypervisor.Exposure{Port: n, Target: target})
	}
	dir, err := filepath.Abs(filepath.Join(dataDir, "machines"))
	if err != nil {
		return nil, err
	}
	cfg := vpc.Config{
		ID:     vpc.IDFor(dir),
		Subnet: vpc.Range{Prefix: nodePool, Flag: "--node-pool"},
		Uplink: vpc.Range{Prefix: up, Flag: "--vpc-uplink"},
		Routed: routed, Covered: cover, Local: local,
	}
	if m.uplink6 != "" {
		up6, err := netip.ParsePrefix(m.uplink6)
		if err != nil || !up6.Addr().Is6() {
			return nil, fmt.Errorf("--vpc-uplink6 %q: want an IPv6 prefix such as fd12:3456:789a:ffff::/126", m.uplink6)
		}
		cfg.Subnet6 = vpc.Range{Prefix: nodePool6, Flag: "--node-pool-v6"}
		cfg.Uplink6 = vpc.Range{Prefix: up6, Flag: "--vpc-uplink6"}
	}
	return &hypervisor.Options{Dir: dir, VPC: cfg, Expose: expose}, nil
}
