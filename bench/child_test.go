package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	routecontroller "k8s.io/cloud-provider/controllers/route"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/component-base/featuregate"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	_ "k8s.io/controller-manager/pkg/features/register" // the gates upstream's route controller reads

	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/cloud/upstream"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

// childEnv carries a contender's settings to the re-executed test binary,
// so that each contender runs in its own process (its own peak RSS).
const childEnv = "PORTSIDE_BENCH_CHILD"

// contender is one controller configuration under test.
type contender struct {
	Name     string  `json:"name"`
	Upstream bool    `json:"upstream"`
	Workers  int     `json:"workers"`
	QPS      float32 `json:"qps"`
	Burst    int     `json:"burst"`
	// Controller is "node" (cloud node controller), "service", "route",
	// or "join": the cloud node and route controllers together, as a CCM
	// runs them (BenchmarkJoinLatency).
	Controller string `json:"controller"`
	// RouteWorkers, for "join", is Portside's --concurrent-route-syncs
	// (0: its default); Workers is then the node workers.
	RouteWorkers int    `json:"routeWorkers,omitempty"`
	ClusterName  string `json:"clusterName,omitempty"`
	ClusterCIDR  string `json:"clusterCIDR,omitempty"`
	// FeatureGates for upstream's controllers, e.g. "A=true".
	FeatureGates string `json:"featureGates,omitempty"`
	Kubeconfig   string `json:"kubeconfig"`
	CloudConfig  string `json:"cloudConfig"`
}

// runChild runs a contender until SIGTERM; returns the exit code.
func runChild(spec string) int {
	var c contender
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, "bad child spec:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	if c.Upstream {
		err = runUpstream(ctx, c)
	} else {
		o := manager.NewOptions()
		o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", c.CloudConfig, c.Kubeconfig
		o.Controllers = []string{"cloud-node"}
		if c.Controller == "service" {
			o.Controllers = []string{"service"}
			o.ConcurrentServiceSyncs = c.Workers
		}
		if c.Controller == "route" {
			o.Controllers = []string{"route"}
			o.AllocateNodeCIDRs, o.ClusterCIDR, o.ClusterName = true, c.ClusterCIDR, c.ClusterName
			o.ConcurrentRouteSyncs = c.Workers
		}
		if c.Controller == "join" {
			// Pod CIDRs come from elsewhere (kube-controller-manager's IPAM),
			// as upstream's CCM expects.
			o.Controllers = []string{"cloud-node", "route"}
			o.ClusterCIDR, o.ClusterName = c.ClusterCIDR, c.ClusterName
			if c.RouteWorkers > 0 {
				o.ConcurrentRouteSyncs = c.RouteWorkers
			}
		}
		o.LeaderElect, o.SecurePort, o.BindAddress = false, 0, "127.0.0.1"
		o.KubeAPIQPS, o.KubeAPIBurst = c.QPS, c.Burst
		if c.Controller != "route" && c.Workers > 0 {
			o.ConcurrentNodeSyncs = c.Workers
		}
		var ready func(addr string)
		if c.Controller == "join" {
			ready = func(addr string) { go announceReady(ctx, addr) }
		}
		err = manager.Run(ctx, o, manager.DefaultControllers(), ready)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "contender:", err)
		return 1
	}
	return 0
}

// runUpstream runs k8s.io/cloud-provider's cloud node controller on the
// same cloud, through the reverse adapter, configured as upstream's CCM
// configures it (protobuf, the given QPS, workers).
func runUpstream(ctx context.Context, c contender) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = c.QPS, c.Burst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	p, err := cloud.New(ctx, "local", c.CloudConfig)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 12*time.Hour)
	metrics := controllersmetrics.NewControllerManagerMetrics("bench")
	if c.Controller == "join" {
		return runUpstreamJoin(ctx, c, cfg, factory, upstream.ToUpstream(p), metrics)
	}
	if c.Controller == "route" {
		return runUpstreamRoutes(ctx, c, client, factory, upstream.ToUpstream(p), metrics)
	}
	if c.Controller == "service" {
		sc, err := servicecontroller.New(upstream.ToUpstream(p), client, factory.Core().V1().Services(), factory.Core().V1().Nodes(),
			"kubernetes", featuregate.NewFeatureGate())
		if err != nil {
			return err
		}
		factory.Start(ctx.Done())
		sc.Run(ctx, c.Workers, metrics)
		return nil
	}
	nc, err := nodecontroller.NewCloudNodeController(factory.Core().V1().Nodes(), client, upstream.ToUpstream(p),
		5*time.Minute, int32(c.Workers), int32(c.Workers))
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	nc.RunWithContext(ctx, metrics)
	return nil
}

// runUpstreamRoutes runs k8s.io/cloud-provider's route controller as
// upstream's CCM does: --route-reconciliation-period 10s.
func runUpstreamRoutes(ctx context.Context, c contender, client kubernetes.Interface, factory informers.SharedInformerFactory,
	cp cloudprovider.Interface, metrics *controllersmetrics.ControllerManagerMetrics) error {
	if c.FeatureGates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(c.FeatureGates); err != nil {
			return err
		}
	}
	routes, ok := cp.Routes()
	if !ok {
		return fmt.Errorf("provider has no routes")
	}
	cidrs, err := parseCIDRs(c.ClusterCIDR)
	if err != nil {
		return err
	}
	rc, err := routecontroller.New(routes, client, factory.Core().V1().Nodes(), c.ClusterName, cidrs)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	rc.Run(ctx, 10*time.Second, metrics)
	return nil
}

// childReady is what a "join" contender prints once its informers have
// synced, so the harness knows when it can start.
const childReady = "bench-child: informers synced"

// announceReady polls Portside's /readyz (true once the informers have
// synced) and prints childReady.
func announceReady(ctx context.Context, addr string) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the child's own self-signed serving certificate on loopback
	}}
	for ctx.Err() == nil {
		resp, err := hc.Get("https://" + addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Fprintln(os.Stderr, childReady)
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runUpstreamJoin runs upstream's cloud node controller and route
// controller together, as upstream's CCM does: each controller with a
// client of its own (its own QPS budget, as upstream's client builder
// gives them), shared informers, --route-reconciliation-period 10s.
func runUpstreamJoin(ctx context.Context, c contender, cfg *rest.Config, factory informers.SharedInformerFactory,
	cp cloudprovider.Interface, metrics *controllersmetrics.ControllerManagerMetrics) error {
	nodeClient, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	routeClient, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	nc, err := nodecontroller.NewCloudNodeController(factory.Core().V1().Nodes(), nodeClient, cp,
		5*time.Minute, int32(c.Workers), int32(c.Workers))
	if err != nil {
		return err
	}
	routes, ok := cp.Routes()
	if !ok {
		return fmt.Errorf("provider has no routes")
	}
	cidrs, err := parseCIDRs(c.ClusterCIDR)
	if err != nil {
		return err
	}
	rc, err := routecontroller.New(routes, routeClient, factory.Core().V1().Nodes(), c.ClusterName, cidrs)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	fmt.Fprintln(os.Stderr, childReady)
	go nc.RunWithContext(ctx, metrics)
	rc.Run(ctx, 10*time.Second, metrics)
	return nil
}

// parseCIDRs parses a comma-separated --cluster-cidr.
func parseCIDRs(list string) ([]*net.IPNet, error) {
	var cidrs []*net.IPNet
	for _, s := range strings.Split(list, ",") {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return nil, err
		}
		cidrs = append(cidrs, n)
	}
	return cidrs, nil
}
