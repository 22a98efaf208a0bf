// Package nodelifecycle is the cloud node lifecycle controller
// (cloud-node-lifecycle-controller): it deletes Nodes whose instance the
// cloud positively reports gone (also for nodes without a providerID), and
// adds or removes the node.cloudprovider.kubernetes.io/shutdown taint. A
// failing or slow cloud never deletes anything: only (false, nil) from
// InstanceExists does.
package nodelifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/controllers/queue"
	"github.com/portside-io/portside/pkg/cloud"
)

// Name and alias of the controller (upstream names).
const (
	Name  = "cloud-node-lifecycle-controller"
	Alias = "cloud-node-lifecycle"
	// TaintShutdown marks a node whose instance is stopped.
	TaintShutdown = "node.cloudprovider.kubernetes.io/shutdown"
)

// Action is what the controller does to one node.
type Action int

// Actions, decided by Decide.
const (
	Nothing Action = iota
	DeleteNode
	AddShutdownTaint
	RemoveShutdownTaint
)

// Decide is the controller's core: from the node's readiness and what the
// cloud said, what to do. exists and shutdown are only consulted for
// not-ready nodes.
func Decide(node *corev1.Node, exists, shutdown bool) Action {
	tainted := hasShutdownTaint(node)
	if isReady(node) {
		if tainted {
			return RemoveShutdownTaint
		}
		return Nothing
	}
	switch {
	case !exists:
		return DeleteNode
	case shutdown && !tainted:
		return AddShutdownTaint
	}
	return Nothing
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasShutdownTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintShutdown })
}

// Config configures the controller.
type Config struct {
	Client    kubernetes.Interface
	Nodes     coreinformers.NodeInformer
	Instances cloud.Instances
	Recorder  record.EventRecorder
	// Period between checks of not-ready nodes (--node-monitor-period).
	Period time.Duration
	// Workers check nodes in parallel.
	Workers int
	Metrics prometheus.Registerer
}

// Controller is the cloud node lifecycle controller.
type Controller struct {
	cfg     Config
	lister  corelisters.NodeLister
	synced  cache.InformerSynced
	queue   queue.Queue
	metrics *metrics
}

// New returns the controller.
func New(cfg Config) *Controller {
	m := newMetrics(cfg.Metrics)
	cfg.Instances = m.instances(cfg.Instances) // counts cloud calls, as upstream
	return &Controller{
		cfg: cfg, lister: cfg.Nodes.Lister(), synced: cfg.Nodes.Informer().HasSynced,
		queue:   queue.New("cloud-node-lifecycle", time.Second, 2*time.Minute),
		metrics: m,
	}
}

// Run checks nodes every Period until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	klog.FromContext(ctx).Info("Starting", "period", c.cfg.Period, "workers", c.cfg.Workers)
	go func() {
		t := time.NewTicker(c.cfg.Period)
		defer t.Stop()
		for {
			c.enqueueCandidates()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	queue.Run(ctx, c.queue, c.cfg.Workers, c.metrics.monitor.Track(c.sync))
}

// enqueueCandidates queues the nodes that may need something: not ready
// (cloud check), or ready but still carrying the shutdown taint. It begins
// a pass, upstream's MonitorNodes loop, timed until they are all processed.
func (c *Controller) enqueueCandidates() {
	c.metrics.monitor.Begin()
	defer c.metrics.monitor.End()
	nodes, _ := c.lister.List(labels.Everything())
	for _, n := range nodes {
		if !isReady(n) || hasShutdownTaint(n) {
			c.metrics.monitor.Add(n.Name)
			c.queue.Add(n.Name)
		}
	}
}

func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	exists, shutdown := true, false
	if !isReady(node) {
		ref := cloud.NodeFrom(node)
		if exists, err = c.cfg.Instances.InstanceExists(ctx, ref); err != nil {
			return fmt.Errorf("instance exists: %w", err) // retried; never a deletion
		}
		if exists {
			if shutdown, err = c.cfg.Instances.InstanceShutdown(ctx, ref); err != nil && !cloud.IsNotImplemented(err) {
				return fmt.Errorf("instance shutdown: %w", err)
			}
		}
	}
	logger := klog.FromContext(ctx).WithValues("node", name)
	switch Decide(node, exists, shutdown) {
	case DeleteNode:
		c.cfg.Recorder.Eventf(node, corev1.EventTypeNormal, ReasonDeletingNode, "Deleting node %s because its instance does not exist in the cloud", name)
		uid := node.UID
		err := c.cfg.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonDeletingNodeFailed, "Error deleting node %s: %v", name, err)
			return err
		}
		c.metrics.deleted.Inc()
		logger.Info("Deleted node: its instance is gone")
	case AddShutdownTaint:
		taints := append(slices.Clone(node.Spec.Taints), corev1.Taint{Key: TaintShutdown, Effect: corev1.TaintEffectNoSchedule})
		return c.patchTaints(ctx, node, taints)
	case RemoveShutdownTaint:
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == TaintShutdown })
		return c.patchTaints(ctx, node, taints)
	}
	return nil
}

// patchTaints replaces the taint list, guarded by resourceVersion.
func (c *Controller) patchTaints(ctx context.Context, node *corev1.Node, taints []corev1.Taint) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	_, err := c.cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		return queue.RetryAfter(100*time.Millisecond, err)
	}
	return err
}
