package devenv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/localcloud/hypervisor"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/realnode"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// Node modes of `portside up --node-mode`.
const (
	NodeModeSimulated = "simulated"
	NodeModeReal      = "real"
	// NodeModeAuto is real where the machine allows it, else simulated
	// with one line saying why (make demo's choice).
	NodeModeAuto = "auto"
)

// LabelMachine marks the Nodes of real machines `up` made (kubelet sets
// it from the machine's user data).
const LabelMachine = "portside.io/machine"

// apiServerGatewayPort is where real nodes reach kube-apiserver: the VPC
// gateway's port, served by the cloud from the apiserver's loopback port.
const apiServerGatewayPort = 6443

// realNetwork is a real-node environment's address plan, kept in the data
// directory: a /22 of 198.18.0.0/16 (198.18.0.0/15 is reserved for
// benchmarking, never routed on the internet) for the machines' subnet
// (/24) and the VIPs (/24), and the host↔router uplink (/30) in
// 198.19.255.0/24, outside the nodes' /16: Kubernetes' e2e suite takes a
// client inside a node address's /16 for a node (source NAT), and the
// host is a client from outside. The slot is chosen from the data
// directory's path so two environments rarely share one (vpc.Up refuses
// an overlap, naming it).
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
	// The data directory's slot, or the next one nothing on the host uses
	// (another environment, a test's VPC) and no environment starting now
	// has claimed: once chosen it is kept, and claimed while it runs.
	sum := sha256.Sum256([]byte(l.dir))
	first := binary.BigEndian.Uint32(sum[:4]) % realNetworkSlots
	var claims []*claim
	fail := func(err error) (realNetwork, []*claim, error) {
		for _, c := range claims {
			c.release()
		}
		return n, nil, err
	}
	for i := uint32(0); ; i++ {
		if i == realNetworkSlots {
			return fail(fmt.Errorf("every /22 of 198.18.0.0/16 is in use on this host: stop another real-node environment"))
		}
		slot := (first + i) % realNetworkSlots
		n = realNetworkAt(slot)
		free, err := vpc.Unused(n.Block)
		if err != nil {
			return fail(err)
		}
		if up, err := vpc.Unused(n.Uplink); err != nil {
			return fail(err)
		} else if !free || !up {
			continue
		}
		c, held, err := tryClaim(vpcClaim(slot), l.dir)
		if err != nil {
			return fail(err)
		}
		if !held {
			claims = append(claims, c)
			break
		}
	}
	// From the data directory's own starting point too: two environments
	// starting at the same moment rarely try the same range first.
	seed := binary.BigEndian.Uint32(sum[4:8])
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

// claimRealNetwork claims the ranges of a kept plan for this run.
func claimRealNetwork(l layout, n realNetwork) ([]*claim, error) {
	slot := (n.Block.Addr().As4()[2] / 4) // the /22's index in 198.18.0.0/16
	names := []struct{ what, name string }{
		{fmt.Sprintf("VPC %s (uplink %s)", n.Block, n.Uplink), vpcClaim(uint32(slot))},
		{"pod range " + n.Pods.String(), rangeClaim(n.Pods)},
		{"Service range " + n.Services.String(), rangeClaim(n.Services)},
	}
	var claims []*claim
	for _, x := range names {
		c, held, err := tryClaim(x.name, l.dir)
		if held {
			err = heldError(x.what, x.name, l.dir)
		}
		if err != nil {
			for _, c := range claims {
				c.release()
			}
			return nil, err
		}
		claims = append(claims, c)
	}
	return claims, nil
}

// vpcClaim and rangeClaim name the claims of a real network's parts.
func vpcClaim(slot uint32) string      { return fmt.Sprintf("vpc-slot/%d", slot) }
func rangeClaim(p netip.Prefix) string { return "range/" + p.String() }

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

// realNodesUnavailable says why this machine cannot run real nodes, and
// what to change ("" when it can).
func realNodesUnavailable() string {
	if os.Geteuid() != 0 {
		return "real nodes need root (network and mount namespaces, cgroups): run as root, or use --node-mode=simulated"
	}
	for _, t := range []string{"ip", "nsenter", "unshare"} {
		if _, err := exec.LookPath(t); err != nil {
			return t + " not found: install iproute2 and util-linux, or use --node-mode=simulated"
		}
	}
	for _, t := range []string{tools.Runc, tools.Nft} {
		if _, err := tools.SystemPath(t); err != nil {
			return err.Error()
		}
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "overlay") {
		return "the kernel has no overlay filesystem (containerd's snapshotter): load the overlay module, or use --node-mode=simulated"
	}
	dir, err := tools.BinDir()
	if err != nil {
		return err.Error()
	}
	if _, err := tools.FindNodeBinaries(dir); err != nil {
		return err.Error()
	}
	return ""
}

// startRealNodes boots node-1 … node-n as real machines of the local
// cloud: each instance's user data (cluster CA, kube-apiserver at the
// gateway, a bootstrap token, kube-proxy's credential, the registry
// mirror) boots containerd, kubelet and kube-proxy in it; the kubelets
// TLS-bootstrap and register their Nodes, which the CCM then initializes.
func startRealNodes(n, wantZones int) func(context.Context, *stack, *environment) error {
	return func(ctx context.Context, s *stack, env *environment) error {
		regions, err := env.cloudClient.Regions(ctx)
		if err != nil || len(regions) == 0 {
			return fmt.Errorf("the local cloud lists no regions (%v)", err)
		}
		zones, err := chooseZones(regions[0].Name, regions[0].Zones, wantZones, n)
		if err != nil {
			return err
		}
		binDir, err := tools.BinDir()
		if err != nil {
			return err
		}
		bins, err := tools.FindNodeBinaries(binDir)
		if err != nil {
			return err
		}
		imgs, cached, err := nodeimages.Cached(binDir)
		if err != nil {
			return err
		}
		how := "built from source"
		if cached {
			// The same inputs as the last build: its output, not rebuilt.
			how = "built from source (the same as last time: kept in " + nodeimages.CacheDir(binDir) + ")"
		}
		pushed, err := nodeimages.PushServed(ctx, env.cloudClient, imgs)
		if err != nil {
			return err
		}
		names := make([]string, len(pushed))
		for i, p := range pushed {
			names[i] = p.Name
		}
		s.p.step("nodes", "images %s, pushed to the cloud's registry: %s", how, strings.Join(names, ", "))
		userData, err := realUserData(ctx, env, bins)
		if err != nil {
			return err
		}
		if err := ensureRealInstances(ctx, env, n, zones, userData); err != nil {
			return err
		}
		s.push("the real machines (powering off through the cloud)", func() { powerOffMachines(env) }, nil)
		s.p.step("nodes", "%d real machines booting in the cloud's VPC %s (containerd, kubelet, kube-proxy each; logs in %s)",
			n, env.realNet.Subnet, filepath.Join(env.cloud(), "machines", "<instance>", "log"))
		// Credentials: readable by root only, like the rest of nodes/.
		joinFile := NodeUserDataFile(env.dir)
		if err := os.WriteFile(joinFile, []byte(userData), 0o600); err != nil {
			return err
		}
		s.p.step("nodes", "to add a node: portside cloud instances create NAME --data-dir %s --zone %s --label %s=real --user-data-file %s",
			env.cloud(), zones[0], LabelMachine, joinFile)
		return waitRealNodesRegistered(ctx, s, env)
	}
}

// realUserData is every machine's user data: the cluster's parts only.
func realUserData(ctx context.Context, env *environment, bins tools.NodeBinaries) (string, error) {
	shared := env.nodesShared()
	if err := os.MkdirAll(shared, 0o700); err != nil {
		return "", err
	}
	token, err := realnode.EnsureBootstrap(ctx, env.client, 24*time.Hour)
	if err != nil {
		return "", err
	}
	kp, err := env.cp.IssueClientCert("kube-proxy", "system:kube-proxy")
	if err != nil {
		return "", err
	}
	apiURL := "https://" + netip.AddrPortFrom(env.realNet.gateway(), apiServerGatewayPort).String()
	ca := filepath.Join(shared, "ca.crt")
	files := map[string][]byte{"ca.crt": env.cp.CAPEM(), "kube-proxy.crt": kp.CertPEM, "kube-proxy.key": kp.KeyPEM,
		"kube-proxy.kubeconfig": []byte(realnode.KubeProxyKubeconfig(apiURL, ca, filepath.Join(shared, "kube-proxy.crt"), filepath.Join(shared, "kube-proxy.key")))}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(shared, f), data, 0o600); err != nil {
			return "", err
		}
	}
	reg, err := os.ReadFile(filepath.Join(env.cloud(), server.RegistryVPCEndpointFile))
	if err != nil {
		return "", fmt.Errorf("the cloud serves no registry to its VPC: %w", err)
	}
	// Pods name private images by the registry's own host, as users push
	// them, or by its gateway name; the machines reach it at the gateway
	// (plain HTTP).
	vpcRegistry := "http://" + strings.TrimSpace(string(reg))
	credProvider, err := realNodeCredentialProvider(env, shared)
	if err != nil {
		return "", err
	}
	c := realnode.BootConfig{
		Bin: realnode.Binaries{Kubelet: bins.Kubelet, KubeProxy: bins.KubeProxy, Containerd: bins.Containerd, Shim: bins.ContainerdShimRuncV2,
			Runc: bins.Runc, CNIDir: bins.CNIBinDir, CredentialProviderDir: filepath.Join(env.credentialProvider(), "bin")},
		APIServer: apiURL, CAFile: ca, BootstrapToken: token, KubeProxyKubeconfig: filepath.Join(shared, "kube-proxy.kubeconfig"),
		ClusterCIDR: env.podCIDR(), ClusterDomain: "cluster.local", SandboxImage: nodeimages.PauseImage, CredentialProviderConfig: credProvider,
		Mirrors:    map[string]string{"registry.k8s.io": vpcRegistry, env.registryHost: vpcRegistry, strings.TrimPrefix(vpcRegistry, "http://"): vpcRegistry},
		NodeLabels: map[string]string{LabelMachine: "real"},
		ClusterDNS: env.clusterDNS(), // the kube-dns Service (part_dns.go)
		IPv6Only:   env.ipv6Only,
	}
	data, err := json.Marshal(c)
	return string(data), err
}

// ensureRealInstances replaces the machines of an earlier run (simulated
// or real) and their Nodes with n fresh real ones: the control plane's
// certificates are new at every start, so an earlier machine's kubelet
// credentials would not be accepted.
func ensureRealInstances(ctx context.Context, env *environment, n int, zones []string, userData string) error {
	existing, err := env.cloudClient.ListInstances(ctx, "")
	if err != nil {
		return err
	}
	var stale []string
	for _, inst := range existing {
		if inst.Labels[LabelSimulated] != "true" && inst.Labels[LabelMachine] != "real" {
			continue // not up's
		}
		if err := env.cloudClient.DeleteInstance(ctx, inst.ID); err != nil {
			return fmt.Errorf("delete machine %s of an earlier run: %w", inst.Name, err)
		}
		stale = append(stale, inst.Name)
	}
	if err := nodesim.New(env.client, concurrency).Delete(ctx, stale); err != nil {
		return fmt.Errorf("delete the nodes of an earlier run: %w", err)
	}
	byName := map[string]api.Instance{}
	env.nodes = make([]nodeInfo, n)
	errs := make([]error, n)
	workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
		name, zone := nodeName(i), zones[i%len(zones)]
		inst, ok := byName[name]
		if !ok {
			// Each machine's own: its network proxy agent's credential.
			ud, err := nodeAgentUserData(env, name, userData)
			if err != nil {
				errs[i] = err
				return
			}
			created, err := env.cloudClient.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: zone,
				Labels: map[string]string{LabelMachine: "real"}, UserData: ud, IPv6: env.vpc6()})
			if err != nil {
				errs[i] = fmt.Errorf("create machine %s: %w", name, err)
				return
			}
			inst = *created
		}
		ip, err := instanceIPv4(inst)
		if env.ipv6Only {
			// The node's one address in the cluster (its kubelet's
			// --node-ip, its agent's health).
			ip, err = instanceIPv6(inst)
		}
		env.nodes[i], errs[i] = nodeInfo{name: name, zone: inst.Zone, ip: ip}, err
	})
	return firstError(ctx, errs)
}

// powerOffMachines stops up's machines through the cloud as `up` stops,
// before the cloud does: its store then records them stopped, so the
// next `up` of this data directory does not boot them again at the
// cloud's start only to replace them (1.7-7 s of a warm start spent
// booting and deleting machines). The same machines ensureRealInstances
// replaces: up's label, nothing else; a failure leaves them to the cloud's
// own shutdown, as before.
func powerOffMachines(env *environment) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insts, err := env.cloudClient.ListInstances(ctx, "")
	if err != nil {
		return
	}
	workqueue.ParallelizeUntil(ctx, 4, len(insts), func(i int) {
		if insts[i].Labels[LabelMachine] == "real" && insts[i].State == api.InstanceRunning {
			_, _ = env.cloudClient.StopInstance(ctx, insts[i].ID)
		}
	})
}

// waitRealNodesRegistered waits until every machine's kubelet registered
// its Node.
func waitRealNodesRegistered(ctx context.Context, s *stack, env *environment) error {
	began := time.Now()
	for {
		missing := ""
		for _, n := range env.nodes {
			if _, err := env.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err != nil {
				missing = n.name
				break
			}
		}
		if missing == "" {
			s.p.step("nodes", "%d kubelets TLS-bootstrapped and registered in %.1fs", len(env.nodes), time.Since(began).Seconds())
			return nil
		}
		if time.Since(began) > 3*time.Minute {
			return fmt.Errorf("node %s did not register within 3 minutes (see %s)", missing, filepath.Join(env.cloud(), "machines"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// nodeSelector selects the Nodes `up` made.
func (env *environment) nodeSelector() string {
	if env.realNodes {
		return LabelMachine + "=real"
	}
	return LabelSimulated + "=true"
}

// cloudGrace is how long the cloud gets to stop: with real machines it
// powers each off (kubelet, kube-proxy, containerd stopped in order, then
// every process of the machine) and removes the sandboxes and the VPC.
func cloudGrace(env *environment) time.Duration {
	if env.realNodes {
		return 90 * time.Second
	}
	return 10 * time.Second
}

// removeMachines removes what a cloud that did not stop cleanly (killed)
// left of its real machines, by its records: `up`'s last step.
func removeMachines(ctx context.Context, p *progress, l layout) {
	if err := hypervisor.Down(ctx, l.machines()); err != nil {
		p.step("shutdown", "real machines left behind: %v (run `portside down`)", err)
	}
}
