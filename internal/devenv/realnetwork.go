package devenv

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/portside-io/portside/internal/localcloud/vpc"
)

// realNetwork is a real-node environment's address plan, kept in the data
// directory: a /22 of 198.18.0.0/16 (198.18.0.0/15 is reserved for
// benchmarking, never routed on the internet) for the machines' subnet
// (/24) and the VIPs (/24), and the host↔router uplink (/30) in
// 198.19.255.0/24, outside the nodes' /16: Kubernetes' e2e suite takes a
// client inside a node address's /16 for a node (source NAT), and the
// host is a client from outside. The search for a free slot starts from
// the data directory's path, and the ranges are claimed while the
// environment runs, so two environments never share one (and vpc.Up
// refuses an overlap with the host's routes, naming it).
type realNetwork struct {
	Block  netip.Prefix `json:"block"`
	Subnet netip.Prefix `json:"subnet"`
	// VIPs are the load balancers' addresses, owned by the VPC router.
	VIPs   netip.Prefix `json:"vips"`
	Uplink netip.Prefix `json:"uplink"`
	// Pods and Services are the cluster's pod and Service ranges: covered
	// on the host like the rest, so each real-node environment on a host
	// needs its own (a /16 of 10.224.0.0/11 and of 10.96.0.0/12).
	Pods     netip.Prefix `json:"pods"`
	Services netip.Prefix `json:"services"`
	// The IPv6 ranges of a dual-stack environment (ipfamily.go), chosen
	// the first time it runs with --ip-family=dual.
	Block6    netip.Prefix `json:"block6,omitzero"`
	Subnet6   netip.Prefix `json:"subnet6,omitzero"`
	VIPs6     netip.Prefix `json:"vips6,omitzero"`
	Pods6     netip.Prefix `json:"pods6,omitzero"`
	Services6 netip.Prefix `json:"services6,omitzero"`
	Uplink6   netip.Prefix `json:"uplink6,omitzero"`
	// agentTarget is the proxy server's loopback agent port, served at the
	// gateway's agentGatewayPort ("" without the network proxy).
	agentTarget string
}

func (l layout) realNetworkFile() string { return filepath.Join(l.dir, "real-network.json") }
func (l layout) nodesShared() string     { return filepath.Join(l.dir, "nodes") }

// NodeUserDataFile is the user data a further real machine joins the
// cluster with (`portside cloud instances create --user-data-file`): the
// cluster's parts only, with no host network-proxy agent of its own (the
// agent of --install=chart is the chart's DaemonSet, which covers it).
func NodeUserDataFile(dataDir string) string {
	return filepath.Join(dataDir, "nodes", "user-data.json")
}

// machines is the cloud's hypervisor directory (cli's cloud serve puts it
// at <cloud data dir>/machines).
func (l layout) machines() string { return filepath.Join(l.cloud(), "machines") }

// loadRealNetwork reads the environment's real network plan, or makes one;
// either way its ranges are claimed (tryClaim) for this run.
func loadRealNetwork(l layout) (realNetwork, []*claim, error) {
	var n realNetwork
	if data, err := os.ReadFile(l.realNetworkFile()); err == nil {
		if err := json.Unmarshal(data, &n); err != nil || !n.Block.IsValid() || !n.Subnet.IsValid() || !n.Uplink.IsValid() || !n.VIPs.IsValid() {
			return n, nil, fmt.Errorf("%s is damaged (%v): remove it", l.realNetworkFile(), err)
		}
		if !n.Pods.IsValid() || !n.Services.IsValid() {
			// Written before the ranges were per environment: what it used.
			n.Pods, n.Services = netip.MustParsePrefix(ClusterCIDR), netip.MustParsePrefix(ServiceCIDR)
		}
		claims, err := claimRealNetwork(l, n)
		return n, claims, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return n, nil, err
	}
	first, seed := realNetworkStart(l.dir)
	return newRealNetwork(l, first, seed)
}

// realNetworkStart is where a data directory's search for free ranges
// starts: from its path, so two environments starting at the same moment
// rarely try the same ranges first (and claims settle it when they do).
func realNetworkStart(dir string) (first, seed uint32) {
	sum := sha256.Sum256([]byte(dir))
	return binary.BigEndian.Uint32(sum[:4]) % realNetworkSlots, binary.BigEndian.Uint32(sum[4:8])
}

// newRealNetwork makes and keeps a plan: the first slot from first on
// (wrapping) that nothing on the host uses (another environment, a test's
// VPC) and no environment starting now has claimed, and likewise a pod
// and a Service range from seed's on; all claimed for this run.
func newRealNetwork(l layout, first, seed uint32) (realNetwork, []*claim, error) {
	var n realNetwork
	var claims []*claim
	fail := func(err error) (realNetwork, []*claim, error) {
		releaseAll(claims)
		return n, nil, err
	}
	for i := uint32(0); ; i++ {
		if i == realNetworkSlots {
			return fail(fmt.Errorf("every /22 of 198.18.0.0/16 is in use on this host: stop another real-node environment"))
		}
		n = realNetworkAt((first + i) % realNetworkSlots)
		free, err := vpc.Unused(n.Block)
		if err != nil {
			return fail(err)
		}
		if up, err := vpc.Unused(n.Uplink); err != nil {
			return fail(err)
		} else if !free || !up {
			continue
		}
		got, held, err := claimAll(l.dir, rangeClaim(n.Block), rangeClaim(n.Uplink))
		if err != nil {
			return fail(err)
		}
		if held == "" {
			claims = got
			break
		}
	}
	pods, c, err := firstUnused(netip.MustParsePrefix("10.224.0.0/11"), 16, seed, l.dir)
	if err != nil {
		return fail(fmt.Errorf("pod range: %w", err))
	}
	claims = append(claims, c)
	services, c, err := firstUnused(netip.MustParsePrefix("10.96.0.0/12"), 16, seed, l.dir)
	if err != nil {
		return fail(fmt.Errorf("Service range: %w", err))
	}
	claims = append(claims, c)
	n.Pods, n.Services = pods, services
	data, _ := json.Marshal(n)
	if err := os.WriteFile(l.realNetworkFile(), append(data, '\n'), 0o644); err != nil {
		return fail(err)
	}
	return n, claims, nil
}

// claimRealNetwork claims the ranges of a kept plan for this run, by the
// ranges themselves (plans from before the 198.18.0.0/16 slots too). The
// IPv6 ranges are not claimed: they come from a hash of the data
// directory's path (ula48), 2^40 choices, and vpc.Up refuses an overlap.
func claimRealNetwork(l layout, n realNetwork) ([]*claim, error) {
	parts := []struct {
		what string
		p    netip.Prefix
	}{
		{"VPC " + n.Block.String(), n.Block},
		{"VPC uplink " + n.Uplink.String(), n.Uplink},
		{"pod range " + n.Pods.String(), n.Pods},
		{"Service range " + n.Services.String(), n.Services},
	}
	var claims []*claim
	for _, x := range parts {
		c, held, err := claimAll(l.dir, rangeClaim(x.p))
		if held != "" {
			err = heldError(x.what, held, l.dir)
		}
		if err != nil {
			releaseAll(claims)
			return nil, err
		}
		claims = append(claims, c...)
	}
	return claims, nil
}

// rangeClaim names the claim of an address range (loopback or real).
func rangeClaim(p netip.Prefix) string { return "range/" + p.Masked().String() }

// realNetworkSlots is how many environments' plans there are.
const realNetworkSlots = 64

// realNetworkAt is slot i (0-63): the i-th /22 of 198.18.0.0/16 and the
// i-th /30 of 198.19.255.0/24.
func realNetworkAt(i uint32) realNetwork {
	base := addrAt(198<<24|18<<16, i*1024)
	b := base.As4()
	return realNetwork{
		Block:  netip.PrefixFrom(base, 22),
		Subnet: netip.PrefixFrom(base, 24),
		VIPs:   netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], b[2] + 1, 0}), 24),
		Uplink: netip.PrefixFrom(addrAt(198<<24|19<<16|255<<8, i*4), 30),
	}
}

// firstUnused is the first /bits of pool, from the seed's on (wrapping),
// that nothing on the host uses and no other environment has claimed; it
// is claimed for owner.
func firstUnused(pool netip.Prefix, bits int, seed uint32, owner string) (netip.Prefix, *claim, error) {
	cands := subnets(pool, bits)
	for i := range cands {
		c := cands[(int(seed%uint32(len(cands)))+i)%len(cands)]
		free, err := vpc.Unused(c)
		if err != nil {
			return c, nil, err
		}
		if !free {
			continue
		}
		cl, held, err := tryClaim(rangeClaim(c), owner)
		if err != nil {
			return c, nil, err
		}
		if !held {
			return c, cl, nil
		}
	}
	return netip.Prefix{}, nil, fmt.Errorf("every /%d of %s is in use on this host: stop another real-node environment", bits, pool)
}

// subnets lists the /bits of an IPv4 pool in order.
func subnets(pool netip.Prefix, bits int) []netip.Prefix {
	var out []netip.Prefix
	base := binary.BigEndian.Uint32(pool.Masked().Addr().AsSlice())
	for i := uint32(0); i < 1<<(bits-pool.Bits()); i++ {
		out = append(out, netip.PrefixFrom(addrAt(base, i<<(32-bits)), bits))
	}
	return out
}

// gateway is where the machines reach the host's services.
func (n realNetwork) gateway() netip.Addr { return n.Subnet.Masked().Addr().Next() }

// gateway6 is the IPv6 one (a dual-stack VPC's): where an IPv6-only
// cluster's pods reach kube-apiserver.
func (n realNetwork) gateway6() netip.Addr { return n.Subnet6.Masked().Addr().Next() }

// cloudArgs are `cloud serve`'s flags for real machines: the subnet as its
// node pool, the uplink, the pod range routed into the VPC, every range
// covered on the host (the Service range too: nothing answers it outside
// the nodes), kube-apiserver (and the proxy server's agent port) at the
// gateway, upstream's images public.
func (n realNetwork) cloudArgs(apiServerHost string) []string {
	args := []string{"--machines=real", "--node-pool=" + n.Subnet.String(), "--vpc-uplink=" + n.Uplink.String(),
		"--vip-pool=" + n.VIPs.String(), "--vpc-route=" + n.VIPs.String(), "--vpc-local=" + n.VIPs.String(),
		"--vpc-route=" + n.Pods.String(), "--vpc-cover=" + n.Block.String(), "--vpc-cover=" + n.Uplink.Masked().String(), "--vpc-cover=" + n.Pods.String(), "--vpc-cover=" + n.Services.String(),
		fmt.Sprintf("--vpc-expose=%d=%s", apiServerGatewayPort, apiServerHost),
		"--registry-public-prefix=pause", "--registry-public-prefix=e2e-test-images/", "--registry-public-prefix=coredns/"}
	if n.agentTarget != "" {
		args = append(args, fmt.Sprintf("--vpc-expose=%d=%s", agentGatewayPort, n.agentTarget))
	}
	return args
}
