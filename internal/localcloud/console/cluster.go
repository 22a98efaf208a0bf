package console

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// clusterSource watches the cluster side once its kubeconfig exists (under
// `portside up` the cloud starts before the apiserver).
type clusterSource struct {
	kubeconfig string

	mu      sync.Mutex
	factory informers.SharedInformerFactory
	synced  bool
	err     string
}

func newClusterSource(ctx context.Context, kubeconfig string) *clusterSource {
	cs := &clusterSource{kubeconfig: kubeconfig, err: "waiting for " + kubeconfig}
	go cs.connect(ctx)
	return cs
}

func (cs *clusterSource) setErr(msg string) {
	cs.mu.Lock()
	cs.err = msg
	cs.mu.Unlock()
}

func (cs *clusterSource) connect(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("console")
	var client kubernetes.Interface
	for client == nil {
		if _, err := os.Stat(cs.kubeconfig); err == nil {
			cfg, err := clientcmd.BuildConfigFromFlags("", cs.kubeconfig)
			if err == nil {
				cfg.UserAgent = "portside-cloud-console"
				client, err = kubernetes.NewForConfig(cfg)
			}
			if err != nil {
				cs.setErr(fmt.Sprintf("kubeconfig %s: %v", cs.kubeconfig, err))
			}
		}
		if client == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
	// The console reads a few fields: drop the bulk (images, managed
	// fields, annotations) so a large cluster costs little memory.
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimObject))
	f.Core().V1().Services().Informer()
	f.Core().V1().Nodes().Informer()
	f.Discovery().V1().EndpointSlices().Informer()
	f.Start(ctx.Done())
	cs.mu.Lock()
	cs.factory, cs.err = f, "connecting to the cluster"
	cs.mu.Unlock()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok := true
		for _, done := range f.WaitForCacheSync(waitCtx.Done()) {
			ok = ok && done
		}
		cancel()
		if ok {
			cs.mu.Lock()
			cs.synced, cs.err = true, ""
			cs.mu.Unlock()
			logger.Info("Console joined the cluster", "kubeconfig", cs.kubeconfig)
			return
		}
		if ctx.Err() != nil {
			return
		}
		cs.setErr("the cluster's apiserver does not answer yet")
	}
}

func trimObject(obj any) (any, error) {
	if m, ok := obj.(v1.Object); ok {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
	}
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
		n.Status.VolumesInUse, n.Status.VolumesAttached = nil, nil
	}
	return obj, nil
}

func (cs *clusterSource) state(lbs []LoadBalancer) ClusterState {
	cs.mu.Lock()
	f, synced, msg := cs.factory, cs.synced, cs.err
	cs.mu.Unlock()
	if !synced {
		return ClusterState{Error: msg}
	}
	svcs, _ := f.Core().V1().Services().Lister().List(labels.Everything())
	nodes, _ := f.Core().V1().Nodes().Lister().List(labels.Everything())
	slices, _ := f.Discovery().V1().EndpointSlices().Lister().List(labels.Everything())
	return buildClusterState(svcs, nodes, slices, lbs)
}
