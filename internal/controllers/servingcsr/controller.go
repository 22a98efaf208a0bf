// Package servingcsr is the node serving CSR approver
// (node-serving-csr-approver): it approves the CertificateSigningRequests
// kubelets make for their serving certificates (signer
// kubernetes.io/kubelet-serving, kubelet's serverTLSBootstrap), which
// nothing in Kubernetes approves, when the request is the requestor node's
// own and every address in it is one the cloud reports for that node's
// instance; it denies a node's request that is not, saying why. Upstream's
// CCM has no such controller (real clouds ship one of their own beside it),
// so it runs only when --controllers names it.
package servingcsr

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	certinformers "k8s.io/client-go/informers/certificates/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/controllers/queue"
	"github.com/portside-io/portside/pkg/cloud"
)

// Name of the controller (--controllers) and the component of its events.
const Name = "node-serving-csr-approver"

// Config configures the controller.
type Config struct {
	Client    kubernetes.Interface
	CSRs      certinformers.CertificateSigningRequestInformer
	Nodes     coreinformers.NodeInformer
	Instances cloud.Instances
	Recorder  record.EventRecorder
	Metrics   prometheus.Registerer
	Workers   int
}

// Controller is the serving CSR approver.
type Controller struct {
	cfg     Config
	csrs    certlisters.CertificateSigningRequestLister
	nodes   corelisters.NodeLister
	synced  []cache.InformerSynced
	queue   queue.Queue // CSR names
	metrics *metrics
}

// New registers the event handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	c := &Controller{
		cfg: cfg, csrs: cfg.CSRs.Lister(), nodes: cfg.Nodes.Lister(),
		synced: []cache.InformerSynced{cfg.CSRs.Informer().HasSynced, cfg.Nodes.Informer().HasSynced},
		// Cloud errors back off from 200 ms to a minute: a kubelet waits
		// for its serving certificate, and a cloud outage must not park it
		// for long after the cloud is back.
		queue:   queue.New("node-serving-csr", 200*time.Millisecond, time.Minute),
		metrics: newMetrics(cfg.Metrics),
	}
	if _, err := cfg.CSRs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueCSR(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueCSR(obj) },
	}); err != nil {
		return nil, err
	}
	// A kubelet asks for its serving certificate as it registers its Node,
	// often before the Node exists or has its providerID: those requests
	// wait, and are judged again when it does.
	_, err := cfg.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNode(obj.(*corev1.Node).Name) },
		UpdateFunc: func(old, obj any) {
			if o, n := old.(*corev1.Node), obj.(*corev1.Node); o.Spec.ProviderID != n.Spec.ProviderID {
				c.enqueueNode(n.Name)
			}
		},
	})
	return c, err
}

// pending says whether a CSR is one this controller may still act on: a
// kubelet-serving request not yet decided. The rest never reach the queue.
func pending(csr *certificatesv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && !decided(csr)
}

func (c *Controller) enqueueCSR(obj any) {
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && pending(csr) {
		c.queue.Add(csr.Name)
	}
}

// enqueueNode queues the node's pending serving requests. It lists the
// cache: pending kubelet-serving CSRs are few (KCM's cleaner deletes them
// after a day), and Node adds and providerID changes are rare.
func (c *Controller) enqueueNode(node string) {
	csrs, _ := c.csrs.List(labels.Everything())
	for _, csr := range csrs {
		if pending(csr) && csr.Spec.Username == nodeUserPrefix+node {
			c.queue.Add(csr.Name)
		}
	}
}

// Run works until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	klog.FromContext(ctx).Info("Starting", "workers", c.cfg.Workers)
	queue.Run(ctx, c.queue, c.cfg.Workers, c.sync)
}
