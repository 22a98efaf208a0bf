package manager

import (
	"context"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/controllers/nodeipam"
	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
	"github.com/portside-io/portside/internal/controllers/route"
	"github.com/portside-io/portside/internal/controllers/service"
	"github.com/portside-io/portside/internal/controllers/servingcsr"
	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
)

// DefaultControllers are the controllers Portside's CCM runs with
// --controllers=*, in start order.
func DefaultControllers() []Controller {
	return []Controller{
		{Name: node.Name, Aliases: []string{node.Alias}, ClientName: "node-controller", Start: startCloudNode},
		{Name: nodelifecycle.Name, Aliases: []string{nodelifecycle.Alias}, ClientName: "node-controller", Start: startCloudNodeLifecycle},
		{Name: service.Name, Aliases: []string{service.Alias}, ClientName: "service-controller", Start: startServiceLB},
		{Name: nodeipam.Name, Aliases: []string{nodeipam.Alias}, ClientName: "node-controller", Start: startNodeIPAM},
		{Name: route.Name, Aliases: []string{route.Alias}, ClientName: "route-controller", Start: startRoutes},
		// Not upstream's: '*' leaves it off so that a drop-in CCM starts
		// what upstream's does; `portside up` names it for its real nodes.
		{Name: servingcsr.Name, ClientName: servingcsr.Name, DisabledByDefault: true, Start: startServingCSR},
	}
}

func startCloudNode(ctx context.Context, cc *ControllerContext) (string, error) {
	inst, ok := cc.Cloud.Instances()
	if !ok {
		return "the cloud provider has no instances", nil
	}
	c, err := node.New(node.Config{
		Client: cc.Client, Nodes: cc.Informers.Core().V1().Nodes(), Instances: inst,
		Recorder: cc.Recorder("cloud-node-controller"), Workers: cc.Options.ConcurrentNodeSyncs,
		StatusUpdateFrequency: cc.Options.NodeStatusUpdateFrequency, Metrics: cc.Metrics,
	})
	if err != nil {
		return "", err
	}
	go c.Run(ctx)
	return "", nil
}

func startCloudNodeLifecycle(ctx context.Context, cc *ControllerContext) (string, error) {
	inst, ok := cc.Cloud.Instances()
	if !ok {
		return "the cloud provider has no instances", nil
	}
	c := nodelifecycle.New(nodelifecycle.Config{
		Client: cc.Client, Nodes: cc.Informers.Core().V1().Nodes(), Instances: inst,
		Recorder: cc.Recorder("cloud-node-lifecycle-controller"), Period: cc.Options.NodeMonitorPeriod,
		Workers: cc.Options.ConcurrentNodeSyncs, Metrics: cc.Metrics,
	})
	go c.Run(ctx)
	return "", nil
}

func startServiceLB(ctx context.Context, cc *ControllerContext) (string, error) {
	lbs, ok := cc.Cloud.LoadBalancers()
	if !ok {
		return "the cloud provider has no load balancers", nil
	}
	c, err := service.New(service.Config{
		Client: cc.Client, Services: cc.Informers.Core().V1().Services(), Nodes: cc.Informers.Core().V1().Nodes(),
		LoadBalancers: lbs, Recorder: cc.Recorder("service-controller"), ClusterName: cc.Options.ClusterName, ClusterUID: cc.ClusterUID,
		Class: cc.Options.LoadBalancerClass, Workers: cc.Options.ConcurrentServiceSyncs, Metrics: cc.Metrics,
	})
	if err != nil {
		return "", err
	}
	go c.Run(ctx)
	return "", nil
}

func startNodeIPAM(ctx context.Context, cc *ControllerContext) (string, error) {
	o := cc.Options.NetworkOptions
	if !o.AllocateNodeCIDRs {
		return "--allocate-node-cidrs is false", nil
	}
	nw, err := o.network()
	if err != nil {
		return "", err
	}
	inst, _ := cc.Cloud.Instances()
	c, err := nodeipam.New(nodeipam.Config{
		Client: cc.Client, Nodes: cc.Informers.Core().V1().Nodes(), Recorder: cc.Recorder("node-ipam-controller"),
		Metrics: cc.Metrics, Workers: cc.Options.ConcurrentNodeSyncs, AllocatorType: o.CIDRAllocatorType,
		ClusterCIDRs: nw.ClusterCIDRs, NodeMaskSizes: nw.NodeMaskSizes, ServiceCIDRs: nw.ServiceCIDRs, Instances: inst,
	})
	if err != nil {
		return "", err
	}
	go c.Run(ctx)
	return "", nil
}

func startRoutes(ctx context.Context, cc *ControllerContext) (string, error) {
	o := cc.Options.NetworkOptions
	// As upstream's CCM: routes follow --configure-cloud-routes alone, for
	// pod CIDRs given by whoever allocates them (kube-controller-manager's
	// node IPAM, or ours with --allocate-node-cidrs).
	if !o.ConfigureCloudRoutes {
		return "--configure-cloud-routes is false", nil
	}
	routes, ok := cc.Cloud.Routes()
	if !ok {
		return "the cloud provider has no routes", nil
	}
	nw, err := o.network()
	if err != nil {
		return "", err
	}
	if len(nw.ClusterCIDRs) == 0 {
		// Upstream fails to start here; a stock manifest that leaves
		// --configure-cloud-routes at its default gets a clear skip instead.
		return "--configure-cloud-routes needs --cluster-cidr, the pods' CIDR(s) that routes are made for", nil
	}
	c, err := route.New(route.Config{
		Client: cc.Client, Nodes: cc.Informers.Core().V1().Nodes(), Routes: routes,
		Recorder: cc.Recorder("route_controller"), Metrics: cc.Metrics, ClusterName: cc.Options.ClusterName, ClusterUID: cc.ClusterUID,
		ClusterCIDRs: nw.ClusterCIDRs, Workers: o.ConcurrentRouteSyncs, StatusWorkers: cc.Options.ConcurrentNodeSyncs,
		ResyncPeriod: o.RouteReconciliationPeriod,
	})
	if err != nil {
		return "", err
	}
	go c.Run(ctx)
	return "", nil
}

func startServingCSR(ctx context.Context, cc *ControllerContext) (string, error) {
	inst, ok := cc.Cloud.Instances()
	if !ok {
		return "the cloud provider has no instances, which the approver checks a serving certificate's addresses against", nil
	}
	c, err := servingcsr.New(servingcsr.Config{
		Client: cc.Client, CSRs: cc.Informers.Certificates().V1().CertificateSigningRequests(), Nodes: cc.Informers.Core().V1().Nodes(),
		Instances: inst, Recorder: cc.Recorder("node-serving-csr-approver"), Metrics: cc.Metrics, Workers: cc.Options.ConcurrentNodeSyncs,
	})
	if err != nil {
		return "", err
	}
	go c.Run(ctx)
	return "", nil
}

// DefaultWebhooks are the admission webhooks Portside serves with
// --webhooks (the CCM) or `portside webhook serve`.
func DefaultWebhooks() []webhook.Webhook {
	return []webhook.Webhook{pvlabel.Webhook()}
}
