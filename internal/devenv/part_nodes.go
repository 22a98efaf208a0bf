package devenv

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

const (
	// LabelSimulated marks the machines and Nodes `portside up` made, so a
	// later run with fewer --nodes removes only its own surplus.
	LabelSimulated = "portside.io/simulated"
	// concurrency bounds the cloud and apiserver calls made at once while
	// creating nodes: enough for 200 nodes in seconds on 2 cores.
	concurrency = 16
	// heartbeatInterval is the kubelet's node lease renewal interval.
	heartbeatInterval = 10 * time.Second
)

type nodeInfo struct {
	name, zone string
	ip         netip.Addr
}

func nodeName(i int) string { return "node-" + strconv.Itoa(i+1) }

// startNodes creates a cloud machine per node (reusing those of an earlier
// run), registers the Nodes as kubelets run with --cloud-provider=external
// do, and runs a kube-proxy stand-in on each node's address, in-process.
func startNodes(n, wantZones int) func(context.Context, *stack, *environment) error {
	return func(ctx context.Context, s *stack, env *environment) error {
		regions, err := env.cloudClient.Regions(ctx)
		if err != nil || len(regions) == 0 {
			return fmt.Errorf("the local cloud lists no regions (%v)", err)
		}
		zones, err := chooseZones(regions[0].Name, regions[0].Zones, wantZones, n)
		if err != nil {
			return err
		}
		s.p.step("nodes", "%d machines in the local cloud across %s", n, strings.Join(zones, ", "))
		reused, removed, err := ensureInstances(ctx, env, n, zones)
		if err != nil {
			return err
		}
		if len(removed) > 0 {
			s.p.step("nodes", "removed %d surplus nodes of an earlier run with more --nodes", len(removed))
		}
		kubelets, err := startKubelets(env)
		if err != nil {
			return err
		}
		stopKubelets := func() {
			for _, k := range kubelets {
				_ = k.Close()
			}
		}
		specs := make([]nodesim.NodeSpec, len(env.nodes))
		for i, node := range env.nodes {
			specs[i] = nodesim.NodeSpec{Name: node.name, NodeIPs: []string{node.ip.String()}, Labels: map[string]string{LabelSimulated: "true"},
				KubeletPort: kubelets[i].Port()}
		}
		sim := nodesim.New(env.client, concurrency)
		if err := sim.Register(ctx, specs); err != nil {
			stopKubelets()
			return err
		}
		proxy := nodesim.NewProxyStandIn(env.client)
		for _, node := range env.nodes {
			proxy.AddNode(node.name, node.ip)
		}
		// The stand-ins and heartbeats live until the stack stops them, not
		// until the start-up context ends; they keep its logger.
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Go(func() { proxy.Run(runCtx) })
		wg.Go(func() { sim.Heartbeat(runCtx, heartbeatInterval) })
		wg.Go(func() { sim.RunPods(runCtx) })
		s.push("simulated nodes and kube-proxy stand-ins", func() { cancel(); wg.Wait(); stopKubelets() }, nil)
		first, last := env.nodes[0], env.nodes[len(env.nodes)-1]
		s.p.step("nodes", "%d registered like kubelets with --cloud-provider=external (%d new, %d from an earlier run); kube-proxy stand-ins on %s (%s) … %s (%s)",
			n, n-reused, reused, first.ip, first.name, last.ip, last.name)
		return nil
	}
}

// ensureInstances finds or creates node-1 … node-n, round-robin over zones,
// deletes machines and Nodes an earlier run with more nodes left, and fills
// env.nodes. It returns how many machines existed already, and the names of
// those it removed.
func ensureInstances(ctx context.Context, env *environment, n int, zones []string) (int, []string, error) {
	existing, err := env.cloudClient.ListInstances(ctx, "")
	if err != nil {
		return 0, nil, err
	}
	byName := map[string]api.Instance{}
	var surplus []api.Instance
	for _, inst := range existing {
		byName[inst.Name] = inst
		if i, ok := strings.CutPrefix(inst.Name, "node-"); ok && inst.Labels[LabelSimulated] == "true" {
			if k, err := strconv.Atoi(i); err == nil && k > n {
				surplus = append(surplus, inst)
			}
		}
	}
	env.nodes = make([]nodeInfo, n)
	errs := make([]error, n)
	reused := 0
	var mu sync.Mutex
	workqueue.ParallelizeUntil(ctx, concurrency, n, func(i int) {
		name, zone := nodeName(i), zones[i%len(zones)]
		inst, ok := byName[name]
		if ok && inst.Zone != zone && inst.Labels[LabelSimulated] == "true" {
			// An earlier run spread the nodes over other zones (--zones):
			// a machine cannot move, so it and its Node are made anew.
			if err := env.cloudClient.DeleteInstance(ctx, inst.ID); err != nil {
				errs[i] = fmt.Errorf("delete machine %s (zone %s, now in %s): %w", name, inst.Zone, zone, err)
				return
			}
			if err := nodesim.New(env.client, 1).Delete(ctx, []string{name}); err != nil {
				errs[i] = fmt.Errorf("delete node %s (zone %s, now in %s): %w", name, inst.Zone, zone, err)
				return
			}
			ok = false
		}
		if ok {
			mu.Lock()
			reused++
			mu.Unlock()
		} else {
			created, err := env.cloudClient.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: zone, Labels: map[string]string{LabelSimulated: "true"}})
			if err != nil {
				errs[i] = fmt.Errorf("create machine %s: %w", name, err)
				return
			}
			inst = *created
		}
		ip, err := instanceIPv4(inst)
		env.nodes[i], errs[i] = nodeInfo{name: name, zone: inst.Zone, ip: ip}, err
	})
	if err := firstError(ctx, errs); err != nil {
		return 0, nil, err
	}
	var removed []string
	for _, inst := range surplus {
		if err := env.cloudClient.DeleteInstance(ctx, inst.ID); err != nil {
			return 0, nil, fmt.Errorf("delete surplus machine %s: %w", inst.Name, err)
		}
		removed = append(removed, inst.Name)
	}
	if err := nodesim.New(env.client, concurrency).Delete(ctx, removed); err != nil {
		return 0, nil, fmt.Errorf("delete surplus nodes: %w", err)
	}
	return reused, removed, nil
}

// startKubelets gives each node an HTTPS kubelet endpoint on its address
// (a free port), with one serving certificate of the control plane's CA
// for all of them, so kube-apiserver reaches them (`kubectl logs`, node
// proxy) and verifies them as it verifies real kubelets.
func startKubelets(env *environment) ([]*nodesim.KubeletServer, error) {
	hosts := make([]string, len(env.nodes))
	for i, n := range env.nodes {
		hosts[i] = n.ip.String()
	}
	pair, err := env.cp.IssueServingCert("kubelets", hosts...)
	if err != nil {
		return nil, err
	}
	cert, err := pair.TLSCertificate()
	if err != nil {
		return nil, err
	}
	out := make([]*nodesim.KubeletServer, 0, len(env.nodes))
	for _, n := range env.nodes {
		k, err := nodesim.StartKubelet(nodesim.KubeletOptions{NodeName: n.name, Address: n.ip.String(), Certificate: cert, ClientCAs: env.cp.CAPool()})
		if err != nil {
			for _, k := range out {
				_ = k.Close()
			}
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

func instanceIPv4(inst api.Instance) (netip.Addr, error) {
	for _, a := range inst.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == api.AddressInternalIP && ip.Is4() {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("machine %s (%s) has no IPv4 address", inst.Name, inst.ID)
}

// instanceIPv6 is an instance's IPv6 InternalIP (a dual-stack VPC's).
func instanceIPv6(inst api.Instance) (netip.Addr, error) {
	for _, a := range inst.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == api.AddressInternalIP && ip.Is6() {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("machine %s (%s) has no IPv6 address", inst.Name, inst.ID)
}

func firstError(ctx context.Context, errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}
