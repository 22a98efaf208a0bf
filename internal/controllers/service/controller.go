// Package service is the service load-balancer controller
// (service-lb-controller): LoadBalancer Services get a cloud load balancer
// with upstream's semantics (finalizer, node predicates, status, events),
// with concurrent workers, node-set changes fanned out at once to the load
// balancers whose host set changed (and no cloud call for the others),
// retry-after honoured per Service, and orphaned load balancers collected.
package service

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
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
	Name  = "service-lb-controller"
	Alias = "service"
)

// Config configures the controller.
type Config struct {
	Client        kubernetes.Interface
	Services      coreinformers.ServiceInformer
	Nodes         coreinformers.NodeInformer
	LoadBalancers cloud.LoadBalancers
	Recorder      record.EventRecorder
	ClusterName   string
	// Class, when set, makes the controller serve only Services of this
	// loadBalancerClass (to run beside another implementation).
	Class   string
	Workers int
	// OrphanPeriod is how often cloud load balancers without a Service are
	// looked for (0: 5 minutes).
	OrphanPeriod time.Duration
}

// synced is what the last successful sync of a Service made in the cloud.
type synced struct {
	spec      *cloud.LoadBalancerSpec
	specHash  string
	hostsHash string
}

// Controller is the service load-balancer controller.
type Controller struct {
	cfg       Config
	services  corelisters.ServiceLister
	nodes     corelisters.NodeLister
	hasSynced []cache.InformerSynced
	queue     queue.Queue
	features  cloud.LoadBalancerFeatures

	mu    sync.Mutex
	state map[string]synced // by service key
	hosts struct {
		list []cloud.Host
		hash string
	}
}

// New registers the controller's event handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.OrphanPeriod == 0 {
		cfg.OrphanPeriod = 5 * time.Minute
	}
	c := &Controller{
		cfg: cfg, services: cfg.Services.Lister(), nodes: cfg.Nodes.Lister(),
		hasSynced: []cache.InformerSynced{cfg.Services.Informer().HasSynced, cfg.Nodes.Informer().HasSynced},
		queue:     queue.New("service-lb", time.Second, 5*time.Minute),
		features:  cfg.LoadBalancers.Features(),
		state:     map[string]synced{},
	}
	if _, err := cfg.Services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.onService(nil, obj.(*corev1.Service)) },
		UpdateFunc: func(old, obj any) {
			c.onService(old.(*corev1.Service), obj.(*corev1.Service))
		},
		DeleteFunc: func(obj any) {
			if svc, ok := obj.(*corev1.Service); ok {
				c.queue.Add(serviceKey(svc.Namespace, svc.Name))
			} else if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				c.queue.Add(tomb.Key)
			}
		},
	}); err != nil {
		return nil, err
	}
	_, err := cfg.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.onNodes() },
		UpdateFunc: func(old, obj any) { c.onNodeUpdate(old.(*corev1.Node), obj.(*corev1.Node)) },
		DeleteFunc: func(any) { c.onNodes() },
	})
	return c, err
}

// onService queues a Service that is ours (or was), when something that
// matters changed: status-only updates (our own patches) are ignored.
func (c *Controller) onService(old, svc *corev1.Service) {
	if !WantsLoadBalancer(svc, c.cfg.Class) && !HasFinalizer(svc) {
		return
	}
	if old != nil && equality.Semantic.DeepEqual(old.Spec, svc.Spec) && equalMeta(old, svc) {
		return
	}
	c.queue.Add(serviceKey(svc.Namespace, svc.Name))
}

func equalMeta(a, b *corev1.Service) bool {
	return a.DeletionTimestamp.Equal(b.DeletionTimestamp) && maps.Equal(a.Annotations, b.Annotations) &&
		len(a.Finalizers) == len(b.Finalizers) && a.UID == b.UID
}

// onNodeUpdate filters node updates to those that change the host set.
func (c *Controller) onNodeUpdate(old, n *corev1.Node) {
	if EligibleNode(old) != EligibleNode(n) || old.Spec.ProviderID != n.Spec.ProviderID ||
		!slices.Equal(old.Status.Addresses, n.Status.Addresses) {
		c.onNodes()
	}
}

// onNodes recomputes the host set; when it changed, every Service with a
// load balancer is queued at once (bounded by the workers). Services whose
// load balancer already has this host set make no cloud call.
func (c *Controller) onNodes() {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	hosts := Hosts(nodes)
	hash := HostsHash(hosts)
	c.mu.Lock()
	changed := hash != c.hosts.hash
	c.hosts.list, c.hosts.hash = hosts, hash
	var keys []string
	if changed {
		for k := range c.state {
			keys = append(keys, k)
		}
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

func (c *Controller) currentHosts() ([]cloud.Host, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts.list, c.hosts.hash
}

// Run syncs Services until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.hasSynced...) {
		return
	}
	c.onNodes()
	klog.FromContext(ctx).Info("Starting", "workers", c.cfg.Workers, "class", c.cfg.Class)
	if lister, ok := c.cfg.LoadBalancers.(cloud.LoadBalancerLister); ok {
		go c.collectOrphans(ctx, lister)
	}
	queue.Run(ctx, c.queue, c.cfg.Workers, c.sync)
}
