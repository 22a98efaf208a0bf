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
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	// ClusterUID is the kube-system namespace's UID: load balancers are
	// tagged with it, and orphan collection runs only when it is known.
	ClusterUID types.UID
	// Class, when set, makes the controller serve only Services of this
	// loadBalancerClass (to run beside another implementation).
	Class   string
	Workers int
	// OrphanPeriod is how often cloud load balancers without a Service are
	// looked for (0: 5 minutes).
	OrphanPeriod time.Duration
	// Metrics is where upstream's service_controller_* metrics are registered.
	Metrics prometheus.Registerer
}

// synced is what the last successful sync of a Service made in the cloud.
type synced struct {
	spec      *cloud.LoadBalancerSpec
	specHash  string
	hostsHash string
	// hosts is the host set the cloud has (shared with other load
	// balancers of the same generation: never modified), from which the
	// next host change is computed for providers that change hosts
	// incrementally.
	hosts []cloud.Host
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
	// owner is what we know of who made a Service's load balancer, by UID.
	owner map[types.UID]Ownership
	hosts struct {
		list []cloud.Host
		hash string
	}
	// nodesChanged coalesces node events: the host set is recomputed once
	// per burst (and not at all before the caches are synced), so startup
	// with N nodes costs O(N), not a rescan per node.
	nodesChanged chan struct{}
	metrics      *metrics
	// diffs are the latest host-set differences (hostChanges), newest first.
	diffMu sync.Mutex
	diffs  []hostDiff
	// recomputes counts host-set recomputations (observed by tests only).
	recomputes atomic.Int64
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
		owner:     map[types.UID]Ownership{},
		metrics:   newMetrics(cfg.Metrics),

		nodesChanged: make(chan struct{}, 1),
	}
	if _, err := cfg.Services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.onService(nil, obj.(*corev1.Service)) },
		UpdateFunc: func(old, obj any) {
			c.onService(old.(*corev1.Service), obj.(*corev1.Service))
		},
		DeleteFunc: func(obj any) {
			if svc, ok := queue.Untombstone(obj).(*corev1.Service); ok {
				c.mu.Lock()
				_, had := c.state[serviceKey(svc.Namespace, svc.Name)]
				if !had {
					delete(c.owner, svc.UID) // else forgotten once its LB is deleted
				}
				c.mu.Unlock()
				if had {
					c.queue.Add(serviceKey(svc.Namespace, svc.Name))
				}
			} else if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				c.queue.Add(tomb.Key)
			}
		},
	}); err != nil {
		return nil, err
	}
	_, err := cfg.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.onNodes() },
		UpdateFunc: func(old, obj any) {
			if HostSetChanged(old.(*corev1.Node), obj.(*corev1.Node)) {
				c.onNodes()
			}
		},
		DeleteFunc: func(any) { c.onNodes() },
	})
	return c, err
}

// onService learns who owns a Service's load balancer and queues the
// Services this controller must act on, when something that matters
// changed: status-only updates (our own patches) are ignored, and Services
// of another class are never queued.
func (c *Controller) onService(old, svc *corev1.Service) {
	key := serviceKey(svc.Namespace, svc.Name)
	c.mu.Lock()
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && !OfClass(svc, c.cfg.Class) {
		c.owner[svc.UID] = OwnershipOthers
	}
	if old != nil && old.UID == svc.UID && old.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.Type != corev1.ServiceTypeLoadBalancer &&
		c.owner[svc.UID] == OwnershipUnknown {
		// A type change clears the class: remember whose it was.
		if OfClass(old, c.cfg.Class) {
			c.owner[svc.UID] = OwnershipOurs
		} else {
			c.owner[svc.UID] = OwnershipOthers
		}
	}
	owner := c.owner[svc.UID]
	st, had := c.state[key]
	if had && st.spec.UID == svc.UID && st.spec.Object != svc {
		// Keep the cache's current object, not the one the last sync saw:
		// else every Service is held twice (the cache replaced that one
		// when our own status patch came back), which at 10,000 Services
		// is a quarter of the CCM's memory.
		spec := *st.spec
		spec.Object = svc
		st.spec = &spec
		c.state[key] = st
	}
	c.mu.Unlock()
	if !WantsLoadBalancer(svc, c.cfg.Class) && !NeedsCleanup(svc, c.cfg.Class, owner) && !(had && st.spec.UID == svc.UID) {
		return
	}
	if old != nil && equality.Semantic.DeepEqual(old.Spec, svc.Spec) && equalMeta(old, svc) {
		return
	}
	c.queue.Add(key)
}

// ownership is what this controller knows of svc's load balancer.
func (c *Controller) ownership(svc *corev1.Service) Ownership {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.state[serviceKey(svc.Namespace, svc.Name)]; ok && st.spec.UID == svc.UID {
		return OwnershipOurs
	}
	return c.owner[svc.UID]
}

func (c *Controller) setOwnership(uid types.UID, o Ownership) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o == OwnershipUnknown {
		delete(c.owner, uid)
	} else {
		c.owner[uid] = o
	}
}

func equalMeta(a, b *corev1.Service) bool {
	return a.DeletionTimestamp.Equal(b.DeletionTimestamp) && maps.Equal(a.Annotations, b.Annotations) &&
		len(a.Finalizers) == len(b.Finalizers) && a.UID == b.UID
}

// onNodes asks for the host set to be recomputed.
func (c *Controller) onNodes() {
	select {
	case c.nodesChanged <- struct{}{}:
	default: // a recompute is already pending; it will see this change
	}
}

// watchNodes recomputes the host set after node changes, one burst at a time.
func (c *Controller) watchNodes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.nodesChanged:
			c.recomputeHosts()
		}
	}
}

// recomputeHosts recomputes the host set; when it changed, every Service
// that wants a load balancer (those being made included, so a node change
// during a first ensure is not lost) is queued at once, bounded by the
// workers. Services whose load balancer already has this host set make no
// cloud call.
func (c *Controller) recomputeHosts() {
	c.recomputes.Add(1)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	hosts := Hosts(nodes)
	hash := HostsHash(hosts)
	c.mu.Lock()
	changed := hash != c.hosts.hash
	c.hosts.list, c.hosts.hash = hosts, hash
	c.mu.Unlock()
	if !changed {
		return
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	c.beginNodeSync(svcs)
	for _, svc := range svcs {
		if WantsLoadBalancer(svc, c.cfg.Class) {
			c.queue.Add(serviceKey(svc.Namespace, svc.Name))
		}
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
	c.recomputeHosts()
	// Run returns only when its helpers have stopped too.
	var helpers sync.WaitGroup
	defer helpers.Wait()
	helpers.Go(func() { c.watchNodes(ctx) })
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "workers", c.cfg.Workers, "class", c.cfg.Class, "clusterUID", c.cfg.ClusterUID)
	if lister, ok := c.cfg.LoadBalancers.(cloud.LoadBalancerLister); ok {
		if c.cfg.ClusterUID == "" {
			logger.Info("Orphaned load balancers are not collected: the cluster's UID (of namespace kube-system) is unknown")
		} else {
			helpers.Go(func() { c.collectOrphans(ctx, lister) })
		}
	}
	queue.Run(ctx, c.queue, c.cfg.Workers, c.metrics.nodeSync.Track(c.sync))
}
