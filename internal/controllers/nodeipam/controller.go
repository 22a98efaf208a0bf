// Package nodeipam is the node IPAM controller (node-ipam-controller): it
// gives every node its pod CIDRs (spec.podCIDR and spec.podCIDRs), from the
// cluster CIDRs (RangeAllocator) or as the cloud assigned them
// (CloudAllocator). The range allocator is rebuilt from the nodes before it
// hands out anything, so a restart or a new leader never allocates twice.
package nodeipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
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

	"github.com/portside-io/portside/internal/controllers/podcidr"
	"github.com/portside-io/portside/internal/controllers/queue"
	"github.com/portside-io/portside/pkg/cloud"
)

// Name and alias of the controller (upstream names).
const (
	Name  = "node-ipam-controller"
	Alias = "nodeipam"
)

// Allocator types (--cidr-allocator-type).
const (
	RangeAllocator = "RangeAllocator"
	CloudAllocator = "CloudAllocator"
)

// Config configures the controller.
type Config struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Recorder record.EventRecorder
	Metrics  prometheus.Registerer
	Workers  int
	// AllocatorType is RangeAllocator or CloudAllocator.
	AllocatorType string
	// ClusterCIDRs (one per family) and the node mask size for each.
	ClusterCIDRs  []netip.Prefix
	NodeMaskSizes []int
	// ServiceCIDRs are reserved: never handed to a node.
	ServiceCIDRs []netip.Prefix
	// Instances is the cloud, for CloudAllocator.
	Instances cloud.Instances
}

// Controller is the node IPAM controller.
type Controller struct {
	cfg     Config
	lister  corelisters.NodeLister
	synced  cache.InformerSynced
	queue   queue.Queue
	alloc   *rangeAllocator // nil for CloudAllocator
	metrics *metrics

	// waiting are nodes that found their cluster CIDR full; a freed CIDR
	// queues them again at once instead of waiting out their backoff.
	mu      sync.Mutex
	waiting map[string]bool
}

// New validates the configuration and registers the event handlers.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		cfg: cfg, lister: cfg.Nodes.Lister(), synced: cfg.Nodes.Informer().HasSynced,
		queue:   queue.New("node-ipam", 100*time.Millisecond, 5*time.Minute),
		waiting: map[string]bool{},
	}
	switch cfg.AllocatorType {
	case RangeAllocator:
		a, err := newRangeAllocator(cfg.ClusterCIDRs, cfg.NodeMaskSizes, cfg.ServiceCIDRs)
		if err != nil {
			return nil, err
		}
		c.alloc = a
	case CloudAllocator:
		if cfg.Instances == nil {
			return nil, errors.New("--cidr-allocator-type=CloudAllocator needs a provider with instances")
		}
	default:
		return nil, fmt.Errorf("--cidr-allocator-type=%s is not supported: use %s or %s", cfg.AllocatorType, RangeAllocator, CloudAllocator)
	}
	c.metrics = newMetrics(cfg.Metrics, c.usage)
	_, err := cfg.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.queue.Add(obj.(*corev1.Node).Name) },
		UpdateFunc: func(old, obj any) {
			// Only changes that matter: a node waiting for a CIDR is retried
			// with backoff, not on each of its status updates.
			o, n := old.(*corev1.Node), obj.(*corev1.Node)
			if !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) || o.Spec.ProviderID != n.Spec.ProviderID {
				c.queue.Add(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := queue.Untombstone(obj).(*corev1.Node); ok {
				c.queue.Add(n.Name)
			}
		},
	})
	return c, err
}

// Run rebuilds the allocation from the existing nodes, then assigns CIDRs
// until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	logger := klog.FromContext(ctx)
	if c.alloc != nil {
		nodes, _ := c.lister.List(labels.Everything())
		for _, n := range nodes {
			if cidrs, err := podcidr.Parse(n.Spec.PodCIDRs); err == nil && len(cidrs) > 0 {
				c.alloc.occupy(n.Name, cidrs)
			}
		}
		logger.Info("Rebuilt pod CIDR allocation from nodes", "nodes", len(nodes), "usage", c.alloc.usage())
	}
	logger.Info("Starting", "allocator", c.cfg.AllocatorType, "clusterCIDRs", c.cfg.ClusterCIDRs, "workers", c.cfg.Workers)
	queue.Run(ctx, c.queue, c.cfg.Workers, c.sync)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		if c.alloc != nil && c.alloc.release(name) {
			c.requeueWaiting()
		}
		return nil
	}
	if err != nil {
		return err
	}
	if len(node.Spec.PodCIDRs) > 0 {
		cidrs, err := podcidr.Parse(node.Spec.PodCIDRs)
		if err != nil {
			return nil // the apiserver validates podCIDRs; nothing to do with a bad one
		}
		if c.alloc != nil {
			c.alloc.occupy(name, cidrs)
		}
		return nil
	}
	if !NeedsAllocation(node) {
		return nil
	}
	cidrs, err := c.cidrsFor(ctx, node)
	if err != nil {
		return err
	}
	if err := c.write(ctx, node, cidrs); err != nil {
		if c.alloc != nil && WriteSurelyFailed(err) {
			c.alloc.release(name)
		}
		c.metrics.allocations.WithLabelValues("error").Inc()
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRAssignmentFailed, "Could not assign pod CIDRs %v to node %s: %v", cidrs, name, err)
		return err
	}
	c.metrics.allocations.WithLabelValues("success").Inc()
	klog.FromContext(ctx).V(2).Info("Assigned pod CIDRs", "node", name, "podCIDRs", cidrs)
	return nil
}

// cidrsFor allocates from the cluster CIDRs or asks the cloud.
func (c *Controller) cidrsFor(ctx context.Context, node *corev1.Node) ([]netip.Prefix, error) {
	if c.alloc == nil {
		md, err := c.cfg.Instances.InstanceMetadata(ctx, cloud.NodeFrom(node))
		if err != nil {
			return nil, fmt.Errorf("instance metadata: %w", err)
		}
		if len(md.PodCIDRs) == 0 {
			c.metrics.allocations.WithLabelValues("unavailable").Inc()
			c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRNotAvailable, "The cloud assigned no pod CIDR to the instance of node %s; retrying", node.Name)
			return nil, fmt.Errorf("cloud has no pod CIDR for node %s", node.Name)
		}
		return md.PodCIDRs, nil
	}
	cidrs, err := c.alloc.allocate(node.Name)
	if errors.Is(err, ErrExhausted) {
		c.mu.Lock()
		c.waiting[node.Name] = true
		c.mu.Unlock()
		c.metrics.allocations.WithLabelValues("exhausted").Inc()
		c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRNotAvailable, "Node %s has no pod CIDR: %v; it gets one when a node is deleted or the cluster CIDR grows", node.Name, err)
	}
	return cidrs, err
}

// write sets spec.podCIDR and spec.podCIDRs with a merge patch: the
// apiserver refuses to change pod CIDRs once set, so a node that got CIDRs
// meanwhile (e.g. from a previous leader) fails here instead of being
// overwritten.
func (c *Controller) write(ctx context.Context, node *corev1.Node, cidrs []netip.Prefix) error {
	strs := make([]string, len(cidrs))
	for i, p := range cidrs {
		strs[i] = p.String()
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": strs[0], "podCIDRs": strs}})
	_, err := c.cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (c *Controller) requeueWaiting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.waiting {
		c.queue.Add(n)
	}
	clear(c.waiting)
}

func (c *Controller) usage() map[string][2]int {
	if c.alloc == nil {
		return nil
	}
	return c.alloc.usage()
}
