package devenv

import (
	"context"
	"encoding/json"
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
