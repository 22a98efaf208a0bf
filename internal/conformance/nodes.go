package conformance

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

// Well-known names of the upstream cloud-provider stack.
const (
	TaintUninitialized       = "node.cloudprovider.kubernetes.io/uninitialized"
	AnnotationProvidedNodeIP = "alpha.kubernetes.io/provided-node-ip"
	LabelBetaInstanceType    = "beta.kubernetes.io/instance-type"
	// TaintTestNode keeps workloads off the Nodes the suite registers
	// without a kubelet behind them (as --register-with-taints would).
	TaintTestNode = "conformance.portside.io/no-kubelet"
)

// nodeInitTimeout bounds the wait for the CCM to initialize a new Node.
const nodeInitTimeout = 2 * time.Minute

func nodesInitializedTest() Test {
	return Test{
		Name:    "nodes/initialized",
		Needs:   []Capability{Instances},
		Timeout: time.Minute,
		Run: func(ctx context.Context, t *T) {
			nodes, err := t.Env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list nodes: %v", err)
			}
			checked := 0
			for i := range nodes.Items {
				n := &nodes.Items[i]
				if _, ours := n.Labels[RunLabel]; ours {
					continue // a node another test registered, being exercised
				}
				checked++
				for _, p := range nodeProblems(n, t.Env.ProviderName) {
					t.Errorf("node %s: %s", n.Name, p)
				}
			}
			if checked == 0 {
				t.Fatalf("the cluster has no nodes to check")
			}
			t.Logf("checked %d nodes", checked)
		},
	}
}

// nodeProblems lists what is wrong with an initialized node.
func nodeProblems(n *corev1.Node, providerName string) []string {
	var ps []string
	switch {
	case n.Spec.ProviderID == "":
		ps = append(ps, "spec.providerID is empty")
	case providerName != "" && !strings.HasPrefix(n.Spec.ProviderID, providerName+"://"):
		ps = append(ps, fmt.Sprintf("spec.providerID %q does not start with %q", n.Spec.ProviderID, providerName+"://"))
	}
	for _, pair := range [][2]string{
		{corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone},
		{corev1.LabelTopologyRegion, corev1.LabelFailureDomainBetaRegion},
	} {
		ga, gaOK := n.Labels[pair[0]]
		beta, betaOK := n.Labels[pair[1]]
		if gaOK != betaOK || ga != beta {
			ps = append(ps, fmt.Sprintf("labels %s=%s and %s=%s differ", pair[0], labelValue(ga, gaOK), pair[1], labelValue(beta, betaOK)))
		}
	}
	ga, gaOK := n.Labels[corev1.LabelInstanceTypeStable]
	beta, betaOK := n.Labels[LabelBetaInstanceType]
	switch {
	case ga == "" || beta == "":
		ps = append(ps, fmt.Sprintf("instance type labels must be set: %s=%s %s=%s", corev1.LabelInstanceTypeStable, labelValue(ga, gaOK),
			LabelBetaInstanceType, labelValue(beta, betaOK)))
	case ga != beta:
		ps = append(ps, fmt.Sprintf("labels %s=%s and %s=%s differ", corev1.LabelInstanceTypeStable, ga, LabelBetaInstanceType, beta))
	}
	if len(addresses(n, corev1.NodeInternalIP)) == 0 {
		ps = append(ps, fmt.Sprintf("no InternalIP address (addresses: %v)", n.Status.Addresses))
	}
	if hasTaint(n, TaintUninitialized) {
		ps = append(ps, "still has the "+TaintUninitialized+" taint")
	}
	return ps
}

func labelValue(v string, ok bool) string {
	if !ok {
		return "(unset)"
	}
	return fmt.Sprintf("%q", v)
}

func addresses(n *corev1.Node, typ corev1.NodeAddressType) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == typ {
			out = append(out, a.Address)
		}
	}
	return out
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func providedNodeIPTest() Test {
	return Test{
		Name:    "nodes/provided-node-ip",
		Needs:   []Capability{Instances},
		Timeout: 3 * time.Minute,
		Run: func(ctx context.Context, t *T) {
			tn := newTestNode(ctx, t, "ip")
			n := tn.waitInitialized(ctx, t)
			t.Logf("node %s initialized: providerID %s, addresses %v", n.Name, n.Spec.ProviderID, n.Status.Addresses)
		},
	}
}

// testNode is an instance of the local cloud and the Node a kubelet with
// --cloud-provider=external would register for it.
type testNode struct {
	name string
	inst *api.Instance
	ip   string
	// ips are the provided node IPs in the order the "kubelet" gave them:
	// [ip], or an address of each family (newDualTestNode).
	ips []string
}

// newTestNode creates an instance in the local cloud and registers its
// Node (tainted uninitialized, with the provided-node-ip annotation, the
// kubelet's addresses and a Ready condition); both are deleted at the
// test's end. It skips the test without env.Cloud.
func newTestNode(ctx context.Context, t *T, suffix string) *testNode {
	return newTestNodeOf(ctx, t, suffix, false, false)
}

// newDualTestNode is newTestNode for a dual-stack node: its instance has
// an address of each family, both given as the provided-node-ip in the
// order a kubelet's --node-ip=<v4>,<v6> (or <v6>,<v4> with v6First) gives
// them (KEP-3705: cloud dual-stack node IPs).
func newDualTestNode(ctx context.Context, t *T, suffix string, v6First bool) *testNode {
	return newTestNodeOf(ctx, t, suffix, true, v6First)
}

func newTestNodeOf(ctx context.Context, t *T, suffix string, dual, v6First bool) *testNode {
	c := t.Env.Cloud
	if c == nil {
		t.Skipf("needs a way to create an instance: run against the local cloud with --cloud-data-dir (or --cloud-endpoint)")
	}
	regions, err := c.Regions(ctx)
	if err != nil {
		t.Fatalf("list the cloud's regions: %v", err)
	}
	if len(regions) == 0 || len(regions[0].Zones) == 0 {
		t.Fatalf("the cloud lists no zones")
	}
	tn := &testNode{name: fmt.Sprintf("conformance-%s-%s", t.Env.RunID, suffix)}
	inst, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Name: tn.name, Zone: regions[0].Zones[0], IPv6: dual, Labels: map[string]string{RunLabel: t.Env.RunID}})
	if err != nil {
		t.Fatalf("create instance %s in zone %s: %v", tn.name, regions[0].Zones[0], err)
	}
	tn.inst = inst
	t.Cleanup(func(ctx context.Context) {
		if err := c.DeleteInstance(ctx, inst.ID); err != nil && !client.IsNotFound(err) {
			t.Errorf("clean-up: delete instance %s (%s): %v", tn.name, inst.ID, err)
		}
	})
	ip6 := ""
	for _, a := range inst.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		switch {
		case a.Type != api.AddressInternalIP || err != nil:
		case ip.Is4() && tn.ip == "":
			tn.ip = a.Address
		case ip.Is6() && ip6 == "":
			ip6 = a.Address
		}
	}
	if tn.ip == "" {
		t.Fatalf("instance %s has no IPv4 InternalIP address: %v", tn.name, inst.Addresses)
	}
	tn.ips = []string{tn.ip}
	if dual {
		if ip6 == "" {
			t.Fatalf("instance %s, created with ipv6, has no IPv6 InternalIP address: %v (the local cloud needs an IPv6 node pool: cloud serve --node-pool-v6)", tn.name, inst.Addresses)
		}
		tn.ips = []string{tn.ip, ip6}
		if v6First {
			tn.ips = []string{ip6, tn.ip}
		}
	}
	t.Logf("instance %s (%s) in %s with addresses %v", tn.name, inst.ID, inst.Zone, tn.ips)
	kubeletAddrs := []corev1.NodeAddress{}
	for _, ip := range tn.ips {
		kubeletAddrs = append(kubeletAddrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}

	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        tn.name,
			Labels:      map[string]string{RunLabel: t.Env.RunID, corev1.LabelHostname: tn.name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{AnnotationProvidedNodeIP: strings.Join(tn.ips, ",")},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: TaintTestNode, Value: "true", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{
			Addresses: append(kubeletAddrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: tn.name}),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "registered by the conformance suite", LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}
	nodes := t.Env.Client.CoreV1().Nodes()
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", tn.name, err)
	}
	t.Cleanup(func(ctx context.Context) {
		if err := nodes.Delete(ctx, tn.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clean-up: delete node %s: %v", tn.name, err)
		}
	})
	return tn
}

// waitInitialized waits until the CCM has initialized the node: the taint
// removed, providerID set, and the provided IP its InternalIP.
func (tn *testNode) waitInitialized(ctx context.Context, t *T) *corev1.Node {
	var node *corev1.Node
	t.Eventually(ctx, nodeInitTimeout, "the CCM to initialize node "+tn.name, func(ctx context.Context) (bool, string) {
		n, err := t.Env.Client.CoreV1().Nodes().Get(ctx, tn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var waiting []string
		if hasTaint(n, TaintUninitialized) {
			waiting = append(waiting, "the "+TaintUninitialized+" taint is still there")
		}
		if n.Spec.ProviderID == "" {
			waiting = append(waiting, "spec.providerID is empty")
		}
		if ips := addresses(n, corev1.NodeInternalIP); !slices.Equal(ips, tn.ips) {
			waiting = append(waiting, fmt.Sprintf("InternalIP addresses are %v, want the provided-node-ip %v in its order", ips, tn.ips))
		}
		if len(waiting) > 0 {
			return false, strings.Join(waiting, "; ")
		}
		node = n
		return true, ""
	})
	if p := t.Env.ProviderName; p != "" && !strings.HasPrefix(node.Spec.ProviderID, p+"://") {
		t.Errorf("node %s: spec.providerID %q does not start with %q", tn.name, node.Spec.ProviderID, p+"://")
	}
	// The zone is the instance's, as the cloud knows it.
	if z := node.Labels[corev1.LabelTopologyZone]; z != tn.inst.Zone {
		t.Errorf("node %s: label %s=%q, but its instance %s is in zone %q", tn.name, corev1.LabelTopologyZone, z, tn.inst.ID, tn.inst.Zone)
	}
	if want := fmt.Sprintf("://%s", tn.inst.ID); !strings.HasSuffix(node.Spec.ProviderID, want) {
		t.Logf("node %s: providerID %q does not end with the instance ID %s", tn.name, node.Spec.ProviderID, tn.inst.ID)
	}
	return node
}
