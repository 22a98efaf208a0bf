// Package route is the route controller (node-route-controller): it gives
// every node's pod CIDRs a cloud route to that node, deletes stale and
// blackholed routes inside the cluster CIDRs, and sets the node condition
// NetworkUnavailable. Unlike upstream, which lists every route and walks
// every node each 10 s, it is driven by node events against a cache of the
// cloud's routes, with a full list only at start and every resync period.
package route

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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
	Name  = "node-route-controller"
	Alias = "route"
)

// Config configures the controller.
type Config struct {
	Client      kubernetes.Interface
	Nodes       coreinformers.NodeInformer
	Routes      cloud.Routes
	Recorder    record.EventRecorder
	Metrics     prometheus.Registerer
	ClusterName string
	// ClusterUID (kube-system's UID, "" when unknown) is given to the
	// routes this controller makes; listed routes with another cluster's
	// UID are ignored (cloud.Route.ClusterUID).
	ClusterUID types.UID
	// ClusterCIDRs bound what the controller may delete.
	ClusterCIDRs []netip.Prefix
	// Workers make route calls in parallel; StatusWorkers write node
	// conditions in parallel.
	Workers, StatusWorkers int
	// ResyncPeriod is how often the cloud's routes are listed in full, to
	// repair routes changed behind the controller's back.
	ResyncPeriod time.Duration
}

// Controller is the route controller.
type Controller struct {
	cfg     Config
	lister  corelisters.NodeLister
	synced  cache.InformerSynced
	routes  queue.Queue // node names: make the node's routes right
	status  queue.Queue // node names: make NetworkUnavailable right
	cache   *routeCache
	metrics *metrics

	mu sync.Mutex
	// created records, per node, whether all its routes exist, as of the
	// last sync; the status workers turn it into the node condition. Keyed
	// by name, it holds the node's UID: a node recreated under the same
	// name starts unknown.
	created map[string]routeState
}

// New registers the event handlers.
func New(cfg Config) (*Controller, error) {
	// The cluster name scopes ListRoutes: an empty one could list every
	// cluster's routes, and the resync would delete the others' (the
	// manager refuses it too; this holds for any caller).
	if cfg.ClusterName == "" {
		return nil, errors.New("route controller: the cluster name is empty: give --cluster-name, which scopes the routes this controller lists and deletes")
	}
	if len(cfg.ClusterCIDRs) == 0 {
		return nil, errors.New("route controller: no cluster CIDR: give --cluster-cidr, the routes this controller may delete")
	}
	cfg.Routes = countChanges(cfg.Routes) // for route_controller_route_sync_total
	c := &Controller{
		cfg: cfg, lister: cfg.Nodes.Lister(), synced: cfg.Nodes.Informer().HasSynced,
		routes:  queue.New("node-route", 200*time.Millisecond, 5*time.Minute),
		status:  queue.New("node-route-status", 100*time.Millisecond, time.Minute),
		cache:   newRouteCache(),
		metrics: newMetrics(cfg.Metrics),
		created: map[string]routeState{},
	}
	_, err := cfg.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.routes.Add(obj.(*corev1.Node).Name) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.Node), obj.(*corev1.Node)
			if !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) || !sameAddresses(o.Status.Addresses, n.Status.Addresses) {
				c.routes.Add(n.Name)
			} else if c.conditionOutdated(n) {
				c.status.Add(n.Name) // someone else changed the condition
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := queue.Untombstone(obj).(*corev1.Node); ok {
				c.routes.Add(n.Name)
			}
		},
	})
	return c, err
}

// Run lists the cloud's routes, then works until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "clusterCIDRs", c.cfg.ClusterCIDRs, "workers", c.cfg.Workers, "resyncPeriod", c.cfg.ResyncPeriod)
	// Nothing is created before the first list succeeds: without it, every
	// route would look missing.
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: min(c.cfg.ResyncPeriod, time.Minute)}
	for c.resync(ctx) != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Step()):
		}
	}
	go func() {
		t := time.NewTicker(c.cfg.ResyncPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := c.resync(ctx); err != nil {
					logger.Error(err, "Route resync failed; next one in a period")
				}
			}
		}
	}()
	go queue.Run(ctx, c.status, c.cfg.StatusWorkers, c.syncStatus)
	queue.Run(ctx, c.routes, c.cfg.Workers, c.syncNodeCounted)
}

// resync lists the cloud's routes and queues every node whose routes are
// not right, and every route target that is no longer a node.
func (c *Controller) resync(ctx context.Context) error {
	routes, err := c.cache.list(ctx, c.list)
	if err != nil {
		c.metrics.routeSync(false, err, triggerPeriodic)
		return err
	}
	nodes, _ := c.lister.List(labels.Everything())
	exists := make(map[string]bool, len(nodes))
	queued := 0
	for _, n := range nodes {
		exists[n.Name] = true
		cidrs, err := podcidr.Parse(n.Spec.PodCIDRs)
		if err != nil || len(cidrs) == 0 {
			continue
		}
		if PlanNode(cidrs, n.Status.Addresses, c.cache.routesTo(n.Name), c.cfg.ClusterCIDRs).Empty() {
			c.setCreated(n, true)
			continue
		}
		c.metrics.queuedByResync(n.Name)
		c.routes.Add(n.Name)
		queued++
	}
	for _, target := range c.cache.nodes() {
		if !exists[target] {
			c.metrics.queuedByResync(target)
			c.routes.Add(target)
			queued++
		}
	}
	if queued == 0 {
		c.metrics.routeSync(false, nil, triggerPeriodic)
	}
	klog.FromContext(ctx).V(2).Info("Resynced routes", "routes", len(routes), "nodes", len(nodes), "queued", queued)
	return nil
}

func (c *Controller) list(ctx context.Context) ([]cloud.Route, error) {
	routes, err := c.cfg.Routes.ListRoutes(ctx, c.cfg.ClusterName)
	c.metrics.op("list", err)
	// Another cluster's routes (same name, another UID) are not seen at
	// all: neither deleted as stale nor taken for a node's own.
	return slices.DeleteFunc(routes, func(r cloud.Route) bool { return !OwnedByCluster(r.ClusterUID, c.cfg.ClusterUID) }), err
}

// setCreated records a node's route state and queues a condition write if
// the node's condition does not say so yet.
func (c *Controller) setCreated(n *corev1.Node, ok bool) {
	c.mu.Lock()
	c.created[n.Name] = routeState{uid: n.UID, ok: ok}
	c.mu.Unlock()
	if c.conditionOutdated(n) {
		c.status.Add(n.Name)
	}
}

func (c *Controller) forget(node string) {
	c.mu.Lock()
	delete(c.created, node)
	c.mu.Unlock()
}

type routeState struct {
	uid types.UID
	ok  bool
}

// desiredCondition is the NetworkUnavailable condition a node should have,
// if the controller knows.
func (c *Controller) desiredCondition(n *corev1.Node) (status corev1.ConditionStatus, reason string, known bool) {
	c.mu.Lock()
	st, known := c.created[n.Name]
	c.mu.Unlock()
	if !known || st.uid != n.UID {
		return "", "", false
	}
	if st.ok {
		return corev1.ConditionFalse, ReasonRouteCreated, true
	}
	return corev1.ConditionTrue, ReasonNoRouteCreated, true
}

func (c *Controller) conditionOutdated(n *corev1.Node) bool {
	status, reason, known := c.desiredCondition(n)
	if !known {
		return false
	}
	cur := networkCondition(n)
	return cur == nil || cur.Status != status || cur.Reason != reason
}

func networkCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeNetworkUnavailable {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
