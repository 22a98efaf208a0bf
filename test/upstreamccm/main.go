// Command upstreamccm is upstream's own cloud-controller-manager
// (k8s.io/cloud-provider's app package, as the sample main in
// k8s.io/kubernetes/cmd/cloud-controller-manager builds it) with Portside's
// local provider through pkg/cloud/upstream.ToUpstream, registered as
// "local". The conformance suite runs against it to show it is neutral and
// where upstream's controllers differ. Built by the tests that use it only.
package main

import (
	"io"
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud/upstream"
	"github.com/portside-io/portside/pkg/providers/local"
)

func init() {
	cloudprovider.RegisterCloudProvider(local.ProviderName, func(config io.Reader) (cloudprovider.Interface, error) {
		p, err := local.NewFromReader(config)
		if err != nil {
			return nil, err
		}
		return upstream.ToUpstream(p), nil
	})
}

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}
	fss := cliflag.NamedFlagSets{}
	cmd := app.NewCloudControllerManagerCommand(opts, cloudInitializer, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), fss, wait.NeverStop)
	os.Exit(cli.Run(cmd))
}

func cloudInitializer(config *cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface {
	cc := config.ComponentConfig.KubeCloudShared.CloudProvider
	cloud, err := cloudprovider.InitCloudProvider(cc.Name, cc.CloudConfigFile)
	if err != nil {
		klog.Fatalf("Cloud provider could not be initialized: %v", err)
	}
	if cloud == nil {
		klog.Fatalf("Cloud provider is nil")
	}
	if !cloud.HasClusterID() && config.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
		klog.Warning("detected a cluster without a ClusterID; a ClusterID will be required in the future")
	}
	return cloud
}
