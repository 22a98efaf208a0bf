package devenv

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
	"github.com/portside-io/portside/pkg/providers/local"
)

// Report is what `portside status` shows.
type Report struct {
	DataDir       string       `json:"dataDir"`
	PID           int          `json:"pid"`
	APIServer     string       `json:"apiServer"`
	Cloud         string       `json:"cloud"`
	Nodes         []NodeStatus `json:"nodes"`
	LoadBalancers []LBStatus   `json:"loadBalancers"`
	// CCMLeader is the replica holding the CCM's leader Lease (with
	// --ccm-replicas above 1), e.g. ccm-2; empty without leader election.
	CCMLeader string `json:"ccmLeader,omitempty"`
	// NetworkProxy is set with `up --network-proxy`.
	NetworkProxy []ProxyStatus `json:"networkProxy,omitempty"`
}

// ProxyStatus is one network-proxy server or agent and whether it is
// ready: a server when an agent is connected to it, an agent when it is
// connected to its server.
type ProxyStatus struct {
	Role    string `json:"role"` // "server" or "agent"
	ID      string `json:"id"`
	Zone    string `json:"zone,omitempty"`
	Nodes   int    `json:"nodes,omitempty"`
	Address string `json:"address,omitempty"`
	Ready   bool   `json:"ready"`
	// Reason says why it is not ready (its /readyz answer, or the error).
	Reason string `json:"reason,omitempty"`
}

// NodeStatus is one Node as the CCM left it.
type NodeStatus struct {
	Name        string `json:"name"`
	Zone        string `json:"zone,omitempty"`
	ProviderID  string `json:"providerID,omitempty"`
	InternalIP  string `json:"internalIP,omitempty"`
	Initialized bool   `json:"initialized"`
	// Reason says why a node is not initialized (or is not ready).
	Reason string `json:"reason,omitempty"`
	// PodCIDRs come from the CCM's node IPAM controller.
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// Route is the route controller's NetworkUnavailable verdict: "routed",
	// or the condition's reason while the node has no route.
	Route string `json:"route,omitempty"`
}

// LBStatus is one load balancer of the cloud with its backends' health as
// the data plane sees it.
type LBStatus struct {
	Name    string   `json:"name"`
	Service string   `json:"service,omitempty"`
	VIPs    []string `json:"vips"`
	Ports   []string `json:"ports"`
	State   string   `json:"state"`
	Message string   `json:"message,omitempty"`
	Serving bool     `json:"serving"`
	// Path is how the cloud carries its flows where that is not the
	// proxy alone: LBPathKernel or LBPathRouted (the VPC router).
	Path     string              `json:"path,omitempty"`
	Backends []api.BackendHealth `json:"backends"`
}

// Data paths a load balancer's status names (LBStatus.Path).
const (
	LBPathKernel = "kernel path"
	LBPathRouted = "routed"
)

// lbPath is the data path LBStatus names: routed when a listener has no
// backend port (the router forwards the VIP), the kernel path when the
// data plane says a listener is on it, else "" (the proxy).
func lbPath(listeners []api.Listener, health []api.ListenerHealth) string {
	if slices.ContainsFunc(listeners, func(l api.Listener) bool { return l.BackendPort == 0 }) {
		return LBPathRouted
	}
	if slices.ContainsFunc(health, func(h api.ListenerHealth) bool { return h.Kernel }) {
		return LBPathKernel
	}
	return ""
}

// Status reads the kubeconfig and the cloud's endpoint and token from the
// data directory of a running `portside up` and reports nodes and load
// balancers.
func Status(ctx context.Context, dataDir string) (*Report, error) {
	l := layout{dir: dataDir}
	if abs, err := filepath.Abs(dataDir); err == nil {
		l.dir = abs
	}
	st, err := checkUp(l.pidFile(), proc.Lookup)
	pid := st.rec.PID
	if err != nil || !st.running {
		return nil, fmt.Errorf("no portside up is running with data directory %s: start it with `portside up --data-dir %s`", l.dir, dataDir)
	}
	rep := &Report{DataDir: l.dir, PID: pid, Nodes: []NodeStatus{}, LoadBalancers: []LBStatus{}}
	restCfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rep.APIServer = restCfg.Host
	kc, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	if rep.Nodes, err = nodeStatuses(ctx, kc); err != nil {
		return nil, fmt.Errorf("kube-apiserver at %s: %w", rep.APIServer, err)
	}
	rep.CCMLeader = ccmLeader(ctx, kc, time.Now())
	cc, endpoint, err := cloudClient(l.cloud())
	if err != nil {
		return nil, err
	}
	rep.Cloud = endpoint
	if rep.LoadBalancers, err = lbStatuses(ctx, cc); err != nil {
		return nil, fmt.Errorf("local cloud at %s: %w", endpoint, err)
	}
	rep.NetworkProxy = proxyStatuses(ctx, l)
	return rep, nil
}

// proxyStatuses asks the network proxy's parts for /readyz, if `up` runs one.
func proxyStatuses(ctx context.Context, l layout) []ProxyStatus {
	data, err := os.ReadFile(l.netproxyStateFile())
	if err != nil {
		return nil
	}
	var st netproxyState
	if json.Unmarshal(data, &st) != nil {
		return []ProxyStatus{{Role: "server", Reason: l.netproxyStateFile() + " is damaged"}}
	}
	check := func(p ProxyStatus, health string) ProxyStatus {
		if err := probe(ctx, "http://"+health+"/readyz"); err != nil {
			p.Reason = err.Error()
		} else {
			p.Ready = true
		}
		return p
	}
	out := []ProxyStatus{check(ProxyStatus{Role: "server", ID: st.Server.ID, Address: st.Server.Socket}, st.Server.Health)}
	for _, a := range st.Agents {
		// A real node's agent dials the server at the VPC gateway, and
		// answers on the node's address, which the host reaches through
		// the VPC.
		addr := a.AgentAddress
		if addr == "" {
			addr = st.Server.AgentAddress
		}
		out = append(out, check(ProxyStatus{Role: "agent", ID: a.ID, Zone: a.Zone, Nodes: a.Nodes, Address: addr}, a.Health))
	}
	return out
}

func cloudClient(dir string) (*client.Client, string, error) {
	endpoint, err := os.ReadFile(filepath.Join(dir, server.EndpointFile))
	if err != nil {
		return nil, "", fmt.Errorf("local cloud: no endpoint file in %s (is it still starting?)", dir)
	}
	token, err := client.ReadTokenFile(filepath.Join(dir, server.TokenFile))
	if err != nil {
		return nil, "", fmt.Errorf("local cloud: %w", err)
	}
	e := strings.TrimSpace(string(endpoint))
	return client.New(e, token), e, nil
}

func nodeStatuses(ctx context.Context, kc kubernetes.Interface) ([]NodeStatus, error) {
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	warnings, err := latestWarnings(ctx, kc)
	if err != nil {
		return nil, err
	}
	out := []NodeStatus{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		st := NodeStatus{Name: n.Name, Zone: n.Labels[corev1.LabelTopologyZone], ProviderID: n.Spec.ProviderID}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && st.InternalIP == "" {
				st.InternalIP = a.Address
			}
		}
		st.Initialized, st.Reason = nodeInitialized(n)
		st.PodCIDRs, st.Route = n.Spec.PodCIDRs, routeState(n)
		if w, ok := warnings[n.Name]; ok && !st.Initialized {
			st.Reason += "; last warning: " + w.Reason + ": " + w.Message
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return compareNodeNames(a.Name, b.Name) })
	return out, nil
}

// routeState reads the NetworkUnavailable condition the route controller sets.
func routeState(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			if c.Status == corev1.ConditionFalse {
				return "routed"
			}
			return c.Reason
		}
	}
	return ""
}

// nodeInitialized says whether the CCM has initialized a node, and if not why.
func nodeInitialized(n *corev1.Node) (bool, string) {
	for _, t := range n.Spec.Taints {
		if t.Key == nodesim.TaintUninitialized {
			return false, "uninitialized taint still set"
		}
	}
	if n.Spec.ProviderID == "" {
		return false, "no providerID"
	}
	return true, ""
}

// latestWarnings returns the most recent Warning event of each Node.
func latestWarnings(ctx context.Context, kc kubernetes.Interface) (map[string]corev1.Event, error) {
	list, err := kc.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Node"), fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Event{}
	for _, e := range list.Items {
		if cur, ok := out[e.InvolvedObject.Name]; !ok || eventTime(e).After(eventTime(cur).Time) {
			out[e.InvolvedObject.Name] = e
		}
	}
	return out, nil
}

func eventTime(e corev1.Event) metav1.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp
	}
	return metav1.NewTime(e.EventTime.Time)
}

func lbStatuses(ctx context.Context, cc *client.Client) ([]LBStatus, error) {
	lbs, err := cc.ListLoadBalancers(ctx, "")
	if err != nil {
		return nil, err
	}
	out := []LBStatus{}
	for _, lb := range lbs {
		st := LBStatus{Name: lb.Name, Service: lb.Tags[local.TagServiceName], VIPs: lb.VIPs, State: lb.State, Message: lb.Message, Backends: []api.BackendHealth{}}
		for _, l := range lb.Listeners {
			st.Ports = append(st.Ports, fmt.Sprintf("%d/%s", l.Port, l.Protocol))
		}
		if h, err := cc.LoadBalancerHealth(ctx, lb.Name); err == nil {
			st.Serving, st.Backends = h.Serving, h.Backends
			st.Path = lbPath(lb.Listeners, h.Listeners)
			slices.SortFunc(st.Backends, func(a, b api.BackendHealth) int { return compareNodeNames(a.Name, b.Name) })
		}
		out = append(out, st)
	}
	return out, nil
}

// compareNodeNames sorts names by their text, then by a trailing number,
// so that node-2 comes before node-10.
func compareNodeNames(a, b string) int {
	ta, na := splitNumber(a)
	tb, nb := splitNumber(b)
	if c := strings.Compare(ta, tb); c != 0 {
		return c
	}
	return cmp.Compare(na, nb)
}

func splitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}

// ccmLeader reads the CCM's leader Lease: the replica holding it, if the
// Lease is current (a Lease left by an earlier run with replicas is not).
func ccmLeader(ctx context.Context, kc kubernetes.Interface, now time.Time) string {
	l, err := kc.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return ""
	}
	if now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)) {
		return ""
	}
	replica, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return replica
}
