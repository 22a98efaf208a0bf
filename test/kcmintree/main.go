// Command kcmintree is version N of the leader-migration procedure
// (kubernetes.io, "Migrate Replicated Control Plane To Use Cloud Controller
// Manager"): the cloud half of a kube-controller-manager of v1.30 or older,
// whose in-tree provider ran route, service and cloud-node-lifecycle in
// kube-controller-manager itself. No served Kubernetes has one any more
// (v1.31 removed the in-tree providers, and kube-controller-manager v1.37
// given leader migration exits holding the lease), so this one is put
// together from what that kube-controller-manager was made of: upstream's
// controllers of k8s.io/cloud-provider, the local provider compiled in
// (through pkg/cloud/upstream.ToUpstream, as an in-tree provider was), and
// k8s.io/controller-manager's leader-migration filter as component
// kube-controller-manager, under a main lease and the migration lease as
// kube-controller-manager took them (the main lease first; the migrated
// controllers only while holding the migration lease).
//
// It also runs upstream's cloud-node controller under its main lease: in
// version N the kubelets' in-tree provider initialized their nodes; the
// kubelets here run with --cloud-provider=external and wait for one. It is
// not in the migration (upstream's procedure runs it in the CCM from the
// start); initializing a node twice is harmless.
//
// Built by the tests that use it only (test/realnode's leader migration).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cloudprovider "k8s.io/cloud-provider"
	cloudnode "k8s.io/cloud-provider/controllers/node"
	"k8s.io/cloud-provider/controllers/nodelifecycle"
	"k8s.io/cloud-provider/controllers/route"
	"k8s.io/cloud-provider/controllers/service"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/clientbuilder"
	// The controllers read their gates (route's watch-based reconciliation).
	_ "k8s.io/controller-manager/pkg/features/register"
	"k8s.io/controller-manager/pkg/leadermigration"
	lmconfig "k8s.io/controller-manager/pkg/leadermigration/config"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud/upstream"
	"github.com/portside-io/portside/pkg/providers/local"
)

const component = "kube-controller-manager"

// controllers are kube-controller-manager v1.30's cloud controllers by
// their names there, each with the other names a LeaderMigrationConfiguration
// may give it (the aliases of v1.30, the names of upstream's default
// configuration).
var controllers = []struct {
	name    string
	aliases []string
}{
	{"cloud-node-controller", nil},
	{"service-lb-controller", []string{"service", "service-controller"}},
	{"node-route-controller", []string{"route", "route-controller"}},
	{"cloud-node-lifecycle-controller", []string{"cloud-node-lifecycle"}},
}

func main() {
	klog.InitFlags(nil)
	var (
		kubeconfig    = flag.String("kubeconfig", "", "kubeconfig of kube-controller-manager")
		cloudName     = flag.String("cloud-provider", local.ProviderName, "the in-tree provider")
		cloudConfig   = flag.String("cloud-config", "", "the provider's configuration file")
		clusterName   = flag.String("cluster-name", "kubernetes", "tags the cloud's resources")
		clusterCIDR   = flag.String("cluster-cidr", "", "the pods' CIDRs (comma-separated), for routes")
		routes        = flag.Bool("configure-cloud-routes", true, "run the route controller")
		migration     = flag.Bool("enable-leader-migration", false, "take part in leader migration")
		migrationFile = flag.String("leader-migration-config", "", "LeaderMigrationConfiguration (default: upstream's)")
		leaseName     = flag.String("leader-elect-resource-name", component, "the main lease (kube-system)")
		identity      = flag.String("leader-elect-identity", "", "holder identity (default: hostname_uuid, as kube-controller-manager's)")
		leaseDuration = flag.Duration("leader-elect-lease-duration", 15*time.Second, "")
		renewDeadline = flag.Duration("leader-elect-renew-deadline", 10*time.Second, "")
		retryPeriod   = flag.Duration("leader-elect-retry-period", 2*time.Second, "")
	)
	flag.Parse()
	if err := run(runOptions{*kubeconfig, *cloudName, *cloudConfig, *clusterName, *clusterCIDR, *routes, *migration, *migrationFile,
		*leaseName, *identity, *leaseDuration, *renewDeadline, *retryPeriod}); err != nil {
		klog.ErrorS(err, "kcmintree")
		os.Exit(1)
	}
}

type runOptions struct {
	kubeconfig, cloudName, cloudConfig, clusterName, clusterCIDR string
	routes, migration                                            bool
	migrationFile, leaseName, identity                           string
	leaseDuration, renewDeadline, retryPeriod                    time.Duration
}

func init() {
	cloudprovider.RegisterCloudProvider(local.ProviderName, func(config io.Reader) (cloudprovider.Interface, error) {
		p, err := local.NewFromReader(config)
		if err != nil {
			return nil, err
		}
		return upstream.ToUpstream(p), nil
	})
}

func run(o runOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cloud, err := cloudprovider.InitCloudProvider(o.cloudName, o.cloudConfig)
	if err != nil || cloud == nil {
		return fmt.Errorf("cloud provider %q: %v", o.cloudName, err)
	}
	cloud.Initialize(clientbuilder.SimpleControllerClientBuilder{ClientConfig: cfg}, ctx.Done())
	if o.identity == "" {
		host, _ := os.Hostname()
		o.identity = host + "_" + uuid.NewString()
	}
	// Which lease each controller runs under: without leader migration all
	// under the main one, as kube-controller-manager did.
	filter := func(string) leadermigration.FilterResult { return leadermigration.ControllerNonMigrated }
	var migrationLease string
	if o.migration {
		lm := lmconfig.DefaultLeaderMigrationConfiguration()
		if o.migrationFile != "" {
			if lm, err = lmconfig.ReadLeaderMigrationConfiguration(o.migrationFile); err != nil {
				return err
			}
		}
		if errs := lmconfig.ValidateLeaderMigrationConfiguration(lm); len(errs) > 0 {
			return errs.ToAggregate()
		}
		// The filter compares names: the configuration's by v1.30's.
		for i, l := range lm.ControllerLeaders {
			lm.ControllerLeaders[i].Name = canonical(l.Name)
		}
		filter = leadermigration.NewLeaderMigrator(lm, component).FilterFunc
		migrationLease = lm.LeaderName
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	metrics := controllersmetrics.NewControllerManagerMetrics(component)
	var wg sync.WaitGroup
	start := func(ctx context.Context, lease string, want leadermigration.FilterResult) {
		klog.InfoS("Became leader; starting controllers", "lease", lease, "identity", o.identity)
		for _, c := range controllers {
			if filter(c.name) != want {
				continue
			}
			if c.name == "node-route-controller" && !o.routes {
				klog.InfoS("Controller not started", "controller", c.name, "reason", "--configure-cloud-routes=false")
				continue
			}
			runc, err := newController(c.name, cloud, client, factory, o)
			if err != nil {
				klog.ErrorS(err, "Controller not started", "controller", c.name)
				os.Exit(1)
			}
			wg.Add(1)
			go func() { defer wg.Done(); runc(ctx, metrics) }()
			klog.InfoS("Controller started", "controller", c.name)
		}
		factory.Start(ctx.Done())
	}
	// Controllers stop before their lease is released, so the next holder
	// never runs one beside them.
	ctrlCtx, stopControllers := context.WithCancel(context.Background())
	defer stopControllers()
	electCtx, stopElecting := context.WithCancel(context.Background())
	defer stopElecting()
	mainLed := make(chan struct{})
	var electors sync.WaitGroup
	lead := func(lease string, want leadermigration.FilterResult, led chan struct{}) {
		electors.Add(1)
		go func() {
			defer electors.Done()
			elect(electCtx, client, lease, o, func() {
				start(ctrlCtx, lease, want)
				if led != nil {
					close(led)
				}
			})
		}()
	}
	lead(o.leaseName, leadermigration.ControllerNonMigrated, mainLed)
	if migrationLease != "" {
		// kube-controller-manager competes for the migration lease only
		// once it leads its main lease (its MigrationReady).
		go func() {
			select {
			case <-mainLed:
				lead(migrationLease, leadermigration.ControllerMigrated, nil)
			case <-ctx.Done():
			}
		}()
	}
	<-ctx.Done()
	stopControllers()
	wg.Wait()
	klog.InfoS("Controllers stopped")
	stopElecting()
	electors.Wait()
	return nil
}

// elect leads lease until ctx ends, then releases it. Losing it exits, as
// kube-controller-manager does: its controllers must not run on.
func elect(ctx context.Context, client kubernetes.Interface, lease string, o runOptions, started func()) {
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: lease}, Client: client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity}}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		ReleaseOnCancel: true, Name: lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { started() },
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					klog.ErrorS(nil, "Leader election lost", "lease", lease)
					klog.FlushAndExit(klog.ExitFlushTimeout, 1)
				}
				klog.InfoS("Shut down; lease released", "lease", lease, "identity", o.identity)
			},
		},
	})
}

func canonical(name string) string {
	for _, c := range controllers {
		if c.name == name {
			return name
		}
		for _, a := range c.aliases {
			if a == name {
				return c.name
			}
		}
	}
	return name
}

// newController builds one of upstream's cloud controllers and returns
// what runs it.
func newController(name string, cloud cloudprovider.Interface, client kubernetes.Interface, f informers.SharedInformerFactory, o runOptions) (func(context.Context, *controllersmetrics.ControllerManagerMetrics), error) {
	nodes := f.Core().V1().Nodes()
	switch name {
	case "cloud-node-controller":
		c, err := cloudnode.NewCloudNodeController(nodes, client, cloud, 5*time.Minute, 1, 1)
		if err != nil {
			return nil, err
		}
		return c.RunWithContext, nil
	case "service-lb-controller":
		c, err := service.New(cloud, client, f.Core().V1().Services(), nodes, o.clusterName, utilfeature.DefaultFeatureGate)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, m *controllersmetrics.ControllerManagerMetrics) { c.Run(ctx, 1, m) }, nil
	case "node-route-controller":
		routes, ok := cloud.Routes()
		if !ok {
			return nil, fmt.Errorf("the provider has no routes")
		}
		var cidrs []*net.IPNet
		for _, s := range strings.Split(o.clusterCIDR, ",") {
			_, n, err := net.ParseCIDR(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--cluster-cidr %q: %w", o.clusterCIDR, err)
			}
			cidrs = append(cidrs, n)
		}
		c, err := route.New(routes, client, nodes, o.clusterName, cidrs)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, m *controllersmetrics.ControllerManagerMetrics) {
			c.Run(ctx, 10*time.Second, m)
		}, nil
	case "cloud-node-lifecycle-controller":
		c, err := nodelifecycle.NewCloudNodeLifecycleController(nodes, client, cloud, 5*time.Second, 1)
		if err != nil {
			return nil, err
		}
		return c.Run, nil
	}
	return nil, fmt.Errorf("unknown controller %q", name)
}
