// Package nodesim simulates kubelets started with --cloud-provider=external:
// it registers Node objects the way they do (uninitialized taint,
// provided-node-ip annotation, Hostname and InternalIP addresses, Ready
// condition) and renews their node Leases. It is cheap enough for thousands
// of nodes, and shared by tests, benchmarks and `portside up`.
package nodesim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Well-known names the kubelet uses.
const (
	TaintUninitialized       = "node.cloudprovider.kubernetes.io/uninitialized"
	AnnotationProvidedNodeIP = "alpha.kubernetes.io/provided-node-ip"
	NodeLeaseNamespace       = "kube-node-lease"
	leaseDurationSeconds     = 40
)

// NodeSpec is one simulated kubelet.
type NodeSpec struct {
	Name string
	// NodeIPs is the kubelet's --node-ip (one, or two for dual-stack): it
	// becomes the provided-node-ip annotation and InternalIP addresses.
	NodeIPs []string
	Labels  map[string]string
	// NotReady registers the node with Ready=False.
	NotReady bool
	// PodCIDRs pre-assigns spec.podCIDRs, as a cluster without a node IPAM
	// controller in the CCM would (benchmarks of the route controller).
	PodCIDRs []string
	// KubeletPort is the port of the node's kubelet endpoint
	// (status.daemonEndpoints; see StartKubelet); 0: none.
	KubeletPort int32
	// Realistic makes the Node as big as a real kubelet's (images, every
	// condition, nodeInfo, capacity; see makeRealistic), for benchmarks
	// of memory and of the apiserver's load.
	Realistic bool
}

// Simulator registers and heartbeats simulated nodes.
type Simulator struct {
	client      kubernetes.Interface
	concurrency int

	mu    sync.Mutex
	nodes map[string]bool
}

// New returns a simulator that writes with up to concurrency requests at once.
func New(client kubernetes.Interface, concurrency int) *Simulator {
	return &Simulator{client: client, concurrency: max(1, concurrency), nodes: map[string]bool{}}
}

// Register creates the nodes as kubelets do: the Node with its status
// (tainted, annotated, addresses, Ready), then its Lease. Nodes that exist
// already are left as they are.
func (s *Simulator) Register(ctx context.Context, specs []NodeSpec) error {
	return s.parallel(ctx, len(specs), func(ctx context.Context, i int) error {
		return s.register(ctx, specs[i])
	})
}

func (s *Simulator) register(ctx context.Context, spec NodeSpec) error {
	labels := map[string]string{
		corev1.LabelHostname: spec.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	if len(spec.NodeIPs) > 0 {
		node.Annotations = map[string]string{AnnotationProvidedNodeIP: strings.Join(spec.NodeIPs, ",")}
	}
	if len(spec.PodCIDRs) > 0 {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = spec.PodCIDRs[0], spec.PodCIDRs
	}
	node.Status = nodeStatus(spec)
	if spec.Realistic {
		makeRealistic(node)
	}
	created, err := s.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A kubelet restarted on another port says so in its status.
		if spec.KubeletPort != 0 {
			if err := s.SetKubeletPort(ctx, spec.Name, spec.KubeletPort); err != nil {
				return fmt.Errorf("node %s: kubelet port: %w", spec.Name, err)
			}
		}
		s.track(spec.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", spec.Name, err)
	}
	if err := s.renewLease(ctx, created); err != nil {
		return err
	}
	s.track(spec.Name)
	return nil
}

func (s *Simulator) track(name string) {
	s.mu.Lock()
	s.nodes[name] = true
	s.mu.Unlock()
}

// nodeStatus is the status a kubelet registers with.
func nodeStatus(spec NodeSpec) corev1.NodeStatus {
	addrs := []corev1.NodeAddress{}
	for _, ip := range spec.NodeIPs {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: spec.Name})
	status := corev1.NodeStatus{
		Addresses: addrs,
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
		},
		Conditions: []corev1.NodeCondition{readyCondition(!spec.NotReady, metav1.Now())},
		NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"},
	}
	status.Allocatable = status.Capacity
	status.DaemonEndpoints.KubeletEndpoint.Port = spec.KubeletPort
	return status
}

func readyCondition(ready bool, now metav1.Time) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status (simulated)", LastHeartbeatTime: now, LastTransitionTime: now}
	if !ready {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, "KubeletNotReady", "simulated kubelet stopped"
	}
	return c
}

// SetReady sets a node's Ready condition, as the kubelet (or, for a dead
// kubelet, the node lifecycle controller of kube-controller-manager) would.
func (s *Simulator) SetReady(ctx context.Context, name string, ready bool) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"conditions": []corev1.NodeCondition{readyCondition(ready, metav1.Now())},
	}})
	_, err := s.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// renewLease creates or renews the node's Lease in kube-node-lease.
func (s *Simulator) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := s.client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name), LeaseDurationSeconds: ptr.To[int32](leaseDurationSeconds), RenewTime: &now},
	}
	_, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": now}})
		_, err = leases.Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("node %s lease: %w", node.Name, err)
	}
	return nil
}

// Heartbeat renews the Lease of every registered node each interval (the
// kubelet renews every 10 s) until ctx is done.
func (s *Simulator) Heartbeat(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		names := s.Names()
		_ = s.parallel(ctx, len(names), func(ctx context.Context, i int) error {
			node, err := s.client.CoreV1().Nodes().Get(ctx, names[i], metav1.GetOptions{})
			if err != nil {
				return nil // deleted: its lease is garbage-collected with it
			}
			return s.renewLease(ctx, node)
		})
	}
}

// Names lists the nodes this simulator registered.
func (s *Simulator) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	return names
}

// Delete deletes nodes (as `kubectl delete node` would) and forgets them.
func (s *Simulator) Delete(ctx context.Context, names []string) error {
	err := s.parallel(ctx, len(names), func(ctx context.Context, i int) error {
		err := s.client.CoreV1().Nodes().Delete(ctx, names[i], metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		// Its pods go with it at once, as after a drain: kube-controller-
		// manager's pod GC would take up to a minute (a 40 s quarantine).
		pods, err := s.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + names[i]})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			err := s.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
	s.mu.Lock()
	for _, n := range names {
		delete(s.nodes, n)
	}
	s.mu.Unlock()
	return err
}

// parallel runs fn for 0..n-1 with the simulator's concurrency and returns
// the first error.
func (s *Simulator) parallel(ctx context.Context, n int, fn func(context.Context, int) error) error {
	var once sync.Once
	var first error
	workqueue.ParallelizeUntil(ctx, s.concurrency, n, func(i int) {
		if err := fn(ctx, i); err != nil {
			once.Do(func() { first = err })
		}
	})
	if first == nil {
		first = ctx.Err()
	}
	return first
}
