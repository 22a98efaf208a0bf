package nodesim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// PodAction is what a simulated kubelet does with one pod bound to it.
type PodAction int

const (
	// PodLeave: nothing to do (not ours, already running, or waiting).
	PodLeave PodAction = iota
	// PodStart: report it Running and Ready with an IP.
	PodStart
	// PodFinishDeletion: it is being deleted: confirm, as a kubelet does
	// once the containers are gone.
	PodFinishDeletion
)

// DecidePod is the simulated kubelet's decision for a pod bound to one of
// its nodes (mine reports whether spec.nodeName is a simulated node).
func DecidePod(pod *corev1.Pod, mine bool) PodAction {
	switch {
	case !mine:
		return PodLeave
	case pod.DeletionTimestamp != nil:
		return PodFinishDeletion
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return PodLeave
	case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
		return PodLeave
	}
	return PodStart
}

// PodIP picks the lowest free address of cidr for a pod, the network and
// gateway (.0, .1) left out, as a CNI's host-local IPAM would.
func PodIP(cidr netip.Prefix, used map[netip.Addr]bool) (netip.Addr, error) {
	a := cidr.Masked().Addr().Next().Next()
	for ; cidr.Contains(a); a = a.Next() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full", cidr)
}

// RunPods runs the pods scheduled to the simulated nodes, as kwok does: a
// pod bound to one becomes Running and Ready with an IP from its node's pod
// CIDR (so EndpointSlices get real endpoints), and a pod being deleted is
// deleted for good. It returns when ctx is done.
func (s *Simulator) RunPods(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(s.client, 0)
	pods, nodes := factory.Core().V1().Pods(), factory.Core().V1().Nodes()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodesim-pods"})
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	if err := pods.Informer().AddIndexers(cache.Indexers{byNode: indexByNode}); err != nil {
		klog.FromContext(ctx).Error(err, "Simulated kubelets cannot index pods")
		return
	}
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }})
	// A node that gets its pod CIDR lets its waiting pods start.
	_, _ = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
		if o, n := old.(*corev1.Node), cur.(*corev1.Node); o.Spec.PodCIDR == "" && n.Spec.PodCIDR != "" {
			for _, p := range podsOn(pods.Informer().GetIndexer(), n.Name) {
				enqueue(p)
			}
		}
	}})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, nodes.Informer().HasSynced) {
		return
	}
	r := &podRunner{sim: s, pods: pods.Lister(), byNode: pods.Informer().GetIndexer(), nodes: nodes.Lister(), given: map[types.UID]netip.Addr{}}
	go func() { <-ctx.Done(); q.ShutDown() }()
	// Several workers, as many kubelets report at once: one write at a
	// time would make a 1,000-pod Deployment wait on round trips.
	var wg sync.WaitGroup
	for range podWorkers {
		wg.Go(func() {
			for {
				key, quit := q.Get()
				if quit {
					return
				}
				if err := r.sync(ctx, key); err != nil {
					klog.FromContext(ctx).V(2).Info("Simulated kubelet retries a pod", "pod", key, "err", err)
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				q.Done(key)
			}
		})
	}
	wg.Wait()
}

// podWorkers pods are started or deleted at once.
const podWorkers = 8

const byNode = "nodeName"

// indexByNode indexes pods by spec.nodeName, for podsOn.
func indexByNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

func podsOn(idx cache.Indexer, node string) []*corev1.Pod {
	objs, _ := idx.ByIndex(byNode, node)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

type podRunner struct {
	sim    *Simulator
	pods   corelisters.PodLister
	byNode cache.Indexer
	nodes  corelisters.NodeLister
	// given are the IPs handed out, by pod UID: the informer cache lags the
	// patches, and the next pod on the node must not get the same IP.
	// mu guards it: workers run in parallel.
	mu    sync.Mutex
	given map[types.UID]netip.Addr
}

func (r *podRunner) mine(node string) bool {
	r.sim.mu.Lock()
	defer r.sim.mu.Unlock()
	return r.sim.nodes[node]
}

func (r *podRunner) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := r.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	switch DecidePod(pod, pod.Spec.NodeName != "" && r.mine(pod.Spec.NodeName)) {
	case PodFinishDeletion:
		r.mu.Lock()
		delete(r.given, pod.UID)
		r.mu.Unlock()
		err := r.sim.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case PodStart:
		return r.start(ctx, pod)
	}
	return nil
}

// start reports pod Running and Ready, with an IP of its node's pod CIDR
// (the node's own address for host-network pods).
func (r *podRunner) start(ctx context.Context, pod *corev1.Pod) error {
	node, err := r.nodes.Get(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	var hostIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			hostIP = a.Address
			break
		}
	}
	if hostIP == "" {
		return fmt.Errorf("node %s has no InternalIP yet", node.Name)
	}
	ip := hostIP
	if !pod.Spec.HostNetwork {
		cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
		if err != nil {
			return fmt.Errorf("node %s has no pod CIDR yet", node.Name)
		}
		a, err := r.allocate(pod, node.Name, cidr)
		if err != nil {
			return err
		}
		ip = a.String()
	}
	now := metav1.Now()
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptrTrue(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	status := map[string]any{
		"phase": corev1.PodRunning, "hostIP": hostIP, "hostIPs": []corev1.HostIP{{IP: hostIP}},
		"podIP": ip, "podIPs": []corev1.PodIP{{IP: ip}}, "startTime": now,
		"conditions":        []corev1.PodCondition{cond(corev1.PodScheduled), cond(corev1.PodInitialized), cond(corev1.ContainersReady), cond(corev1.PodReady)},
		"containerStatuses": statuses,
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": pod.ResourceVersion}, "status": status})
	_, err = r.sim.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// allocate picks the pod's IP in cidr (the same one again if it has one):
// not used by another pod on the node, nor handed out to one whose status
// the cache does not show yet. Kept until the pod is deleted, so a failed
// status write never lets another pod take it.
func (r *podRunner) allocate(pod *corev1.Pod, node string, cidr netip.Prefix) (netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	used := map[netip.Addr]bool{}
	for _, p := range podsOn(r.byNode, node) {
		if p.UID == pod.UID {
			continue
		}
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			used[a] = true
		}
		if a, ok := r.given[p.UID]; ok {
			used[a] = true
		}
	}
	a, ok := r.given[pod.UID]
	if !ok || !cidr.Contains(a) {
		var err error
		if a, err = PodIP(cidr, used); err != nil {
			return netip.Addr{}, err
		}
	}
	r.given[pod.UID] = a
	return a, nil
}

func ptrTrue() *bool { return ptr.To(true) }
