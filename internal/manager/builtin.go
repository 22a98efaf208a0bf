package manager

import (
	"context"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
)

// DefaultControllers are the controllers Portside's CCM runs with
// --controllers=*, in start order.
func DefaultControllers() []Controller {
	return []Controller{
		{Name: node.Name, Aliases: []string{node.Alias}, Start: startCloudNode},
		{Name: nodelifecycle.Name, Aliases: []string{nodelifecycle.Alias}, Start: startCloudNodeLifecycle},
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
