package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// network is an environment's loopback ranges, chosen once and kept in the
// data directory: instances keep their addresses across runs, and two
// environments (say `make demo` and the e2e tests) never share a range
// while both run (the slot is claimed).
// Test clouds (localcloudtest) use 127.10-249.x.x; these stay above.
type network struct {
	VIPPool  netip.Prefix `json:"vipPool"`
	NodePool netip.Prefix `json:"nodePool"`
}

// loadNetwork reads the environment's ranges, or picks one of 256 slots
// that no running environment uses (pickSlot): VIPs in a /23 of
// 127.250.0.0/15, node addresses in a /22 of 127.252.0.0/14. The slot is
// claimed (tryClaim) for as long as the environment runs: owner is its
// data directory.
func loadNetwork(path, owner string) (network, []*claim, error) {
	return loadNetworkFrom(path, owner, uint32(rand.IntN(slotCount)))
}

// loadNetworkFrom is loadNetwork with a new slot searched for from start:
// a random start spreads environments.
func loadNetworkFrom(path, owner string, start uint32) (network, []*claim, error) {
	var n network
	data, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(data, &n); err != nil || !n.VIPPool.IsValid() || !n.NodePool.IsValid() {
			return n, nil, fmt.Errorf("%s is damaged (%v): remove it with the data directory (`portside down --purge`)", path, err)
		}
		claims, held, err := claimAll(owner, rangeClaim(n.VIPPool), rangeClaim(n.NodePool))
		if held != "" {
			err = heldError(fmt.Sprintf("loopback ranges %s (VIPs), %s (node addresses)", n.VIPPool, n.NodePool), held, owner)
		}
		return n, claims, err
	}
	if !os.IsNotExist(err) {
		return n, nil, err
	}
	used := slotsInUse()
	for range slotCount {
		slot := pickSlot(used, start)
		if used[slot] {
			break // every slot is used
		}
		n.VIPPool = netip.PrefixFrom(addrAt(127<<24|250<<16, slot*512), 23)
		n.NodePool = netip.PrefixFrom(addrAt(127<<24|252<<16, slot*1024), 22)
		claims, held, err := claimAll(owner, rangeClaim(n.VIPPool), rangeClaim(n.NodePool))
		if err != nil {
			return n, nil, err
		}
		if held != "" {
			used[slot] = true // chosen this instant by another environment
			continue
		}
		data, _ = json.Marshal(n)
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			releaseAll(claims)
			return n, nil, err
		}
		return n, claims, nil
	}
	return n, nil, fmt.Errorf("all %d loopback slots (%s, %s) are in use by running environments: stop one", slotCount, vipSlots, nodeSlots)
}

func addrAt(base, offset uint32) netip.Addr {
	v := base + offset
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// startCloud runs `portside cloud serve` as a child with its state in
// <data-dir>/cloud, so machines and load balancers persist across runs.
func startCloud(ctx context.Context, s *stack, env *environment) error {
	net, claims, err := loadNetwork(env.network(), env.dir)
	if err != nil {
		return err
	}
	for _, c := range claims {
		s.hold(c)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	endpointFile := filepath.Join(env.cloud(), server.EndpointFile)
	// A cloud killed with SIGKILL leaves its endpoint file behind; the new
	// one must not be mistaken for ready because of it.
	_ = os.Remove(endpointFile)
	_, scopedTokens, err := writeNodeToken(env.cloud())
	if err != nil {
		return err
	}
	nodePool, vipPool := net.NodePool, net.VIPPool
	if env.realNodes {
		nodePool, vipPool = env.realNet.Subnet, env.realNet.VIPs
	}
	s.p.step("local cloud", "starting (state in %s, VIPs %s, node addresses %s)", env.cloud(), vipPool, nodePool)
	args := func(listen, registryListen string) []string {
		return []string{"cloud", "serve",
			"--data-dir=" + env.cloud(), "--listen=" + listen, "--registry-listen=" + registryListen,
			"--vip-pool=" + net.VIPPool.String(), "--node-pool=" + net.NodePool.String(),
			// The nodes' credential plugin gets a pull-only token.
			"--scoped-token-file=" + scopedTokens,
			// Health checks twice a second: traffic follows pods within ~1 s.
			"--health-interval=500ms",
			// The console joins the cluster once its kubeconfig exists.
			"--console-kubeconfig=" + env.kubeconfig(),
		}
	}
	if env.realNodes {
		plain := args
		apiHost := strings.TrimPrefix(env.cp.URL, "https://")
		args = func(listen, registryListen string) []string {
			args := append(plain(listen, registryListen), env.realNet.cloudArgs(apiHost)...)
			if env.vpc6() {
				args = append(args, env.realNet.cloudArgs6()...)
			}
			return args
		}
		if env.vpc6() {
			s.p.step("local cloud", "real machines in dual-stack VPC %s, %s (gateways %s, %s serve kube-apiserver and the registry to them; IPv6 VIPs %s)",
				env.realNet.Subnet, env.realNet.Subnet6, env.realNet.gateway(), env.realNet.gateway6(), env.realNet.VIPs6)
		} else {
			s.p.step("local cloud", "real machines in VPC %s (gateway %s serves kube-apiserver and the registry to them)", env.realNet.Subnet, env.realNet.gateway())
		}
	}
	logPath := filepath.Join(env.logs(), "cloud.log")
	p, err := proc.Start("local cloud", exe, args("127.0.0.1:0", "127.0.0.1:0"), nil, logPath)
	if err != nil {
		return err
	}
	s.pushProcess("local cloud", p, cloudGrace(env))
	endpoint, err := waitFile(ctx, p, endpointFile, 30*time.Second)
	if err != nil {
		return processError(err, p)
	}
	// Written before the endpoint file.
	registryHost, err := os.ReadFile(filepath.Join(env.cloud(), server.RegistryEndpointFile))
	if err != nil {
		return processError(err, p)
	}
	env.registryHost = strings.TrimSpace(string(registryHost))
	// Read again when it changes: a token rotated in the cloud (SIGHUP).
	cc, err := client.NewWithTokenFile(endpoint, filepath.Join(env.cloud(), server.TokenFile))
	if err != nil {
		return err
	}
	env.cloudClient, env.cloudEndpoint, env.vipPool = cc, endpoint, vipPool
	regions, err := env.cloudClient.Regions(ctx)
	if err != nil {
		return processError(err, p)
	}
	// A restarted cloud serves on the same addresses, which the CCM's cloud
	// config and the kubelet's credential provider config name, and
	// restores its load balancers and registry from its state.
	listen := strings.TrimPrefix(endpoint, "http://")
	restart := func() (*proc.Process, error) {
		_ = os.Remove(endpointFile)
		next, err := proc.Start("local cloud", exe, args(listen, env.registryHost), nil, logPath)
		if err != nil {
			return nil, err
		}
		if _, err := waitFile(context.WithoutCancel(ctx), next, endpointFile, 30*time.Second); err != nil {
			next.Stop(10 * time.Second)
			return nil, processError(err, next)
		}
		return next, nil
	}
	s.pop() // from here on it is supervised
	s.pushSupervised(supervise(s.p, "local cloud", "local cloud", p, cloudGrace(env), restart))
	s.p.step("local cloud", "serving at %s (pid %d; region %s, zones %s)", endpoint, p.PID(), regions[0].Name, strings.Join(regions[0].Zones, ", "))
	return nil
}

// waitFile waits until a child writes path and returns its trimmed content.
func waitFile(ctx context.Context, p *proc.Process, path string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(data))) > 0 {
			return strings.TrimSpace(string(data)), nil
		}
		select {
		case <-p.Done():
			return "", fmt.Errorf("%w (%v)", errExited, p.ExitErr())
		case <-ctx.Done():
			return "", ctx.Err()
		case <-deadline:
			return "", errors.New("not serving after " + timeout.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
