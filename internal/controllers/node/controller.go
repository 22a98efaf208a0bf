// Package node is the cloud node controller (cloud-node-controller): it
// initializes nodes that kubelets registered with --cloud-provider=external
// (providerID, addresses, zone/region/instance-type labels, the provider's
// labels, then the uninitialized taint removed), in at most two API writes
// per node, and keeps node addresses in sync with the cloud.
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	Name  = "cloud-node-controller"
	Alias = "cloud-node"
)

// Config configures the controller.
type Config struct {
	Client    kubernetes.Interface
	Nodes     coreinformers.NodeInformer
	Instances cloud.Instances
	Recorder  record.EventRecorder
	// Workers initialize nodes in parallel.
	Workers int
	// StatusUpdateFrequency is the period of the address sync of
	// initialized nodes.
	StatusUpdateFrequency time.Duration
	Metrics               prometheus.Registerer
}

// Controller is the cloud node controller.
type Controller struct {
	cfg     Config
	lister  corelisters.NodeLister
	synced  cache.InformerSynced
	init    queue.Queue
	sync    queue.Queue
	metrics *metrics
}

// New registers the controller's event handlers on the node informer.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		cfg:     cfg,
		lister:  cfg.Nodes.Lister(),
		synced:  cfg.Nodes.Informer().HasSynced,
		init:    queue.New("cloud-node-init", 100*time.Millisecond, 5*time.Minute),
		sync:    queue.New("cloud-node-sync", time.Second, 5*time.Minute),
		metrics: newMetrics(cfg.Metrics),
	}
	_, err := cfg.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueue(nil, obj.(*corev1.Node)) },
		UpdateFunc: func(old, obj any) {
			c.enqueue(old.(*corev1.Node), obj.(*corev1.Node))
		},
	})
	return c, err
}

// enqueue filters: a tainted node goes to initialization when it appears or
// when an input of the decision changed (not for our own status patch,
// which would cost a second cloud call per node); an initialized node with
// stale GA labels goes to the sync queue. Failed attempts are retried by
// the queue itself.
func (c *Controller) enqueue(old, n *corev1.Node) {
	switch {
	case HasUninitializedTaint(n):
		if old == nil || !HasUninitializedTaint(old) || old.Spec.ProviderID != n.Spec.ProviderID ||
			old.Annotations[AnnotationProvidedNodeIP] != n.Annotations[AnnotationProvidedNodeIP] {
			c.init.Add(n.Name)
		}
	case GALabelFixes(n) != nil:
		c.sync.Add(n.Name)
	}
}

// Run initializes and syncs nodes until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	logger.Info("Starting", "workers", c.cfg.Workers, "statusUpdateFrequency", c.cfg.StatusUpdateFrequency)
	go queue.Run(ctx, c.sync, max(1, c.cfg.Workers/4), c.syncNode)
	go c.periodicSync(ctx)
	queue.Run(ctx, c.init, c.cfg.Workers, c.initNode)
}

// periodicSync queues every initialized node for an address sync once per
// StatusUpdateFrequency.
func (c *Controller) periodicSync(ctx context.Context) {
	t := time.NewTicker(c.cfg.StatusUpdateFrequency)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		nodes, _ := c.lister.List(labelsEverything)
		for _, n := range nodes {
			if !HasUninitializedTaint(n) {
				c.sync.Add(n.Name)
			}
		}
	}
}

// initNode initializes one node: cloud lookup, decision, at most two writes.
func (c *Controller) initNode(ctx context.Context, name string) error {
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !HasUninitializedTaint(node) {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("node", name)
	md, err := c.cfg.Instances.InstanceMetadata(ctx, cloud.NodeFrom(node))
	if err != nil {
		reason := "CloudError"
		if cloud.IsNotFound(err) {
			reason = ReasonInstanceNotFound
			c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonInstanceNotFound,
				"Node stays uninitialized: the cloud has no instance for it (%v); check that the machine exists and the node name or providerID matches it", err)
		}
		c.metrics.inits.WithLabelValues(reason).Inc()
		return err
	}
	decision, err := DecideInitialization(node, md)
	var ie *InitError
	if errors.As(err, &ie) {
		c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ie.Reason, "Node stays uninitialized: %s", ie.Message)
		c.metrics.inits.WithLabelValues(ie.Reason).Inc()
		return err
	}
	if err := c.apply(ctx, node, decision); err != nil {
		c.metrics.inits.WithLabelValues("APIError").Inc()
		return err
	}
	c.reportWarnings(node, md.Warnings)
	c.metrics.inits.WithLabelValues("success").Inc()
	c.metrics.initLatency.Observe(time.Since(node.CreationTimestamp.Time).Seconds())
	c.metrics.upstreamInitialized(node.CreationTimestamp.Time)
	// No Normal event per node (upstream's "Synced"): at thousands of nodes
	// those events are a write each for nothing a metric does not show.
	logger.V(2).Info("Initialized node", "providerID", md.ProviderID, "zone", md.Zone, "warnings", len(md.Warnings))
	return nil
}

// reportWarnings makes each of the provider's warnings a Warning event on
// the node, so that a node initialized without zone labels or providerID
// says why (upstream leaves them out silently). Only once the node is
// initialized: a failed attempt is retried, and the periodic sync would
// repeat them forever.
func (c *Controller) reportWarnings(node *corev1.Node, warnings []error) {
	for _, w := range warnings {
		if w != nil {
			c.cfg.Recorder.Event(node, corev1.EventTypeWarning, ReasonIncompleteInstanceMetadata, w.Error())
		}
	}
}

// apply writes an initialization in two JSON patches (InitPatches): the
// addresses first (status), so that the node is never schedulable without
// them; then labels, providerID and taints. Patches, not Updates of the
// cached object: the informer cache keeps a trimmed Node (no images,
// nodeInfo, capacity: see the manager's trimForCache). A patch whose guard
// fails (the node changed under the decision) is retried quickly: the
// informer brings the new version and the node is decided again.
func (c *Controller) apply(ctx context.Context, node *corev1.Node, d *Initialization) error {
	nodes := c.cfg.Client.CoreV1().Nodes()
	status, main, err := InitPatches(node, d)
	if err != nil {
		return err
	}
	if status != nil {
		if _, err := nodes.Patch(ctx, node.Name, types.JSONPatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return conflictRetry(fmt.Errorf("update addresses: %w", err))
		}
	}
	if _, err := nodes.Patch(ctx, node.Name, types.JSONPatchType, main, metav1.PatchOptions{}); err != nil {
		return conflictRetry(fmt.Errorf("update node: %w", err))
	}
	return nil
}

// conflictRetry turns a conflict into a quick retry: the informer brings
// the new version and the next attempt decides again.
func conflictRetry(err error) error {
	if apierrors.IsConflict(err) || PatchGuardFailed(err) {
		return queue.RetryAfter(50*time.Millisecond, err)
	}
	return err
}

// syncNode keeps an initialized node's addresses and GA labels current.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && HasUninitializedTaint(node)) {
		return nil
	}
	if err != nil {
		return err
	}
	nodes := c.cfg.Client.CoreV1().Nodes()
	if fix := GALabelFixes(node); fix != nil {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": fix}})
		if _, err := nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch GA labels: %w", err)
		}
	}
	// A node without providerID (a legacy provider's, which cannot name its
	// instances) is synced too: the provider finds it by name, as under
	// upstream's UpdateNodeStatus. Its warnings were reported at
	// initialization.
	cloudAddrs, err := c.instanceAddresses(ctx, node)
	if cloud.IsNotFound(err) {
		return nil // the lifecycle controller decides about vanished instances
	}
	if err != nil {
		return err
	}
	addrs, err := DesiredAddresses(node, cloudAddrs)
	if err != nil {
		var ie *InitError
		if errors.As(err, &ie) {
			c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ie.Reason, "Addresses not updated: %s", ie.Message)
			return nil // retried at the next period, or when the annotation changes
		}
		return err
	}
	if equalAddresses(node.Status.Addresses, addrs) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": addrs}})
	if _, err := nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch addresses: %w", err)
	}
	c.metrics.addrUpdates.Inc()
	return nil
}

// instanceAddresses asks the provider for the node's addresses only, when
// it can (cloud.InstanceAddresser), else for the whole metadata.
func (c *Controller) instanceAddresses(ctx context.Context, node *corev1.Node) ([]corev1.NodeAddress, error) {
	if a, ok := c.cfg.Instances.(cloud.InstanceAddresser); ok {
		return a.InstanceAddresses(ctx, cloud.NodeFrom(node))
	}
	md, err := c.cfg.Instances.InstanceMetadata(ctx, cloud.NodeFrom(node))
	if err != nil {
		return nil, err
	}
	return md.Addresses, nil
}
