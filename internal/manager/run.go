package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud"
)

// defaultClusterName is upstream's --cluster-name default; clusters that
// share a cloud account must not all keep it.
const defaultClusterName = "kubernetes"

// ErrLostLease is returned when this replica stops leading; the process
// exits so that its restart re-joins the election with clean state.
var ErrLostLease = errors.New("lost the leader lease")

// Run runs the CCM until ctx is done, or until it loses the leader lease.
// ready, if set, gets the health/metrics address once serving; the
// webhooks, when served, are listening by then (Options.OnWebhookServing
// gets their address).
func Run(ctx context.Context, o *Options, known []Controller, ready func(addr string)) error {
	logger := klog.FromContext(ctx)
	if err := o.Validate(known); err != nil {
		return err
	}
	if kv := o.IgnoredFlagsLogValues(); kv != nil {
		logger.Info("Accepted upstream cloud-controller-manager flags that Portside ignores", kv...)
	}
	enabled, _ := EnabledControllers(o.Controllers, known)
	provider, err := cloud.New(ctx, o.CloudProvider, o.CloudConfig)
	if err != nil {
		return err
	}
	caps := cloud.Discover(provider)
	logger.Info("Cloud provider ready", "provider", provider.ProviderName(), "capabilities", caps)

	restCfg, err := restConfig(o)
	if err != nil {
		return err
	}
	clients, err := newClients(restCfg, useServiceAccountCredentials(o))
	if err != nil {
		return err
	}
	if o.ClusterName == defaultClusterName {
		logger.Info("Warning: --cluster-name is the default; cloud resources are tagged with it, so give each cluster on a cloud account its own name",
			"clusterName", o.ClusterName)
	}
	reg := NewRegistry()
	provider = instrumentProvider(provider, reg)
	h := &health{}
	addr, serveErr, err := serve(ctx, o, h, reg, restCfg)
	if err != nil {
		return err
	}
	// Webhooks are served on every replica, leader or not: the apiserver
	// calls whichever replica the Service picks. They stop when Run
	// returns; Run returns when they fail.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	whAddr, whErr, err := o.ServeWebhooks(ctx, provider, reg)
	if err != nil {
		return err
	}
	if whAddr != "" && o.OnWebhookServing != nil {
		o.OnWebhookServing(whAddr)
	}
	if ready != nil {
		ready(addr)
	}
	go func() {
		select {
		case err := <-whErr:
			if err != nil {
				stop(&webhookServingError{err})
			}
		case <-ctx.Done():
		}
	}()
	err = lead(ctx, o, enabled, provider, clients, reg, h, serveErr)
	var whFailed *webhookServingError
	if cause := context.Cause(ctx); err == nil && errors.As(cause, &whFailed) {
		return whFailed.err
	}
	return err
}

// webhookServingError stops Run when the webhook server fails.
type webhookServingError struct{ err error }

func (e *webhookServingError) Error() string { return e.err.Error() }

// lead runs the controllers: at once without --leader-elect, else while
// holding the leader Lease (and the migration lease for migrated ones).
func lead(ctx context.Context, o *Options, enabled []Controller, provider cloud.Provider, clients clients,
	reg *prometheus.Registry, h *health, serveErr <-chan error) error {
	logger := klog.FromContext(ctx)
	client := clients.write
	if !o.LeaderElect {
		if o.EnableLeaderMigration {
			logger.Info("Leader migration is off: it needs --leader-elect")
		}
		if err := startControllers(ctx, o, enabled, provider, clients, reg, h); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return err
		}
	}
	mig, _ := o.migration() // validated above
	if mig == nil {
		return elect(ctx, o, client, h, o.LeaderElectLockName, func(ctx context.Context, _ func(error)) error {
			return startControllers(ctx, o, enabled, provider, clients, reg, h)
		})
	}
	own, migrated, unowned := SplitForMigration(enabled, *mig)
	logger.Info("Leader migration", "migrationLease", mig.LeaderName, "migrated", controllerNames(migrated), "own", controllerNames(own), "leftToOthers", unowned)
	// As upstream: the own lease first, its controllers started, and only
	// then the migration lease, so that one process never holds the
	// migration lease while another holds the main one.
	// The migration lease's elector runs beside the main one; the process
	// exits only once it has ended too, so that the migration lease is
	// released on shutdown rather than left to expire (the next holder
	// would otherwise wait out its whole duration).
	var migDone sync.WaitGroup
	defer migDone.Wait()
	return elect(ctx, o, client, h, o.LeaderElectLockName, func(ctx context.Context, fail func(error)) error {
		if err := startControllers(ctx, o, own, provider, clients, reg, h); err != nil {
			return err
		}
		migDone.Add(1)
		go func() {
			defer migDone.Done()
			err := elect(ctx, o, client, h, mig.LeaderName, func(ctx context.Context, _ func(error)) error {
				logger.Info("Holding the migration lease; starting migrated controllers", "lease", mig.LeaderName)
				return startControllers(ctx, o, migrated, provider, clients, reg, h)
			})
			if err != nil && ctx.Err() == nil {
				fail(fmt.Errorf("migration lease %s: %w", mig.LeaderName, err))
			}
		}()
		return nil
	})
}

func controllerNames(cs []Controller) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// clusterUID reads the UID of namespace kube-system, the cluster's identity
// for cloud tags (the name may be shared by clusters). It retries briefly;
// without it, orphan collection stays off rather than guess.
func clusterUID(ctx context.Context, client kubernetes.Interface) types.UID {
	var uid types.UID
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		ns, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Reading namespace kube-system for the cluster UID", "err", err)
			return false, nil
		}
		uid = ns.UID
		return true, nil
	})
	return uid
}

// startControllers starts the informers and every enabled controller, and
// marks the manager ready when the caches are synced.
func startControllers(ctx context.Context, o *Options, enabled []Controller, provider cloud.Provider,
	cs clients, reg prometheus.Registerer, h *health) error {
	logger := klog.FromContext(ctx)
	client := cs.write
	h.ready.Store(false)
	factory := informers.NewSharedInformerFactoryWithOptions(cs.watch, 0, informers.WithTransform(trimForCache))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	go func() {
		<-ctx.Done()
		broadcaster.Shutdown()
	}()
	uid := clusterUID(ctx, client)
	if uid == "" {
		logger.Info("Warning: cannot read namespace kube-system: load balancers are not tagged with the cluster UID and orphans are not collected (grant get on namespaces)")
	}
	cc := &ControllerContext{
		Client: client, Informers: factory, Cloud: provider, Options: o, Metrics: reg, ClusterUID: uid,
		Recorder: func(component string) record.EventRecorder {
			return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
	}
	for _, c := range enabled {
		cctx := klog.NewContext(ctx, logger.WithValues("controller", c.Name))
		own := *cc
		client, err := cs.forController(c)
		if err != nil {
			return err
		}
		own.Client = client
		skip, err := c.Start(cctx, &own)
		if err != nil {
			return fmt.Errorf("controller %s: %w", c.Name, err)
		}
		if skip != "" {
			logger.Info("Controller not started", "controller", c.Name, "reason", skip)
			continue
		}
		logger.Info("Controller started", "controller", c.Name)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				// Asked to stop (SIGTERM, the lease lost) before the
				// caches synced: a requested stop, not a failure.
				return nil
			}
			return fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}
	h.ready.Store(true)
	return nil
}
