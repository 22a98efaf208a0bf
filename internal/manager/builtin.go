package manager

import (
	"context"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
	"github.com/portside-io/portside/internal/controllers/service"
)

// DefaultControllers are the controllers Portside's CCM runs with
// --controllers=*, in start order.
func DefaultControllers() []Controller {
	return []Controller{
		{Name: node.Name, Aliases: []string{node.Alias}, Start: startCloudNode},
		{Name: nodelifecycle.Name, Aliases: []string{nodelifecycle.Alias}, Start: startCloudNodeLifecycle},
		{Name: service.Name, Aliases: []string{service.Alias}, Start: startServiceLB},
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
		LoadBalancers: lbs, Recorder: cc.Recorder("service-controller"), ClusterName: cc.Options.ClusterName,
		Class: cc.Options.LoadBalancerClass, Workers: cc.Options.ConcurrentServiceSyncs,
	})
	if err != nil {
		return "", err
	}
	go c.Run(ctx)
	return "", nil
}
