package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationv1listers "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/netproxy"
)

// Upstream's lease timing (ANP cmd/server/app/server.go).
const (
	LeaseDuration        = 30 * time.Second
	LeaseRenewalInterval = 15 * time.Second
	LeaseGCInterval      = 15 * time.Second
)

// LeaseName is the Lease a server publishes, named as upstream's are, so a
// mixed upstream/Portside set of servers counts together.
func LeaseName(serverID string) string { return "konnectivity-proxy-server-" + serverID }

// CountServers is the server count to tell agents: the valid Leases of
// servers, never less than static (--server-count) nor than 1 (this server
// runs, even if its Lease is not written yet).
func CountServers(leases []coordinationv1.Lease, now time.Time, static int) int {
	n := 0
	for i := range leases {
		if netproxy.LeaseValid(&leases[i], now) {
			n++
		}
	}
	return max(n, static, 1)
}

// LeasePublisher keeps this server's Lease renewed (--enable-lease-
// controller), deletes expired Leases of servers that are gone, and counts
// the live ones: with several servers behind one address (HA), agents are
// told how many to connect to without a static --server-count.
type LeasePublisher struct {
	client    kubernetes.Interface
	namespace string
	selector  labels.Selector
	labels    map[string]string
	serverID  string
	static    int
	now       func() time.Time
	// lister is the servers' Leases, watched, so the count an agent is told
	// is current when it connects (set once Run has synced).
	lister atomic.Pointer[coordinationv1listers.LeaseNamespaceLister]
	// count is the last count, while the lister is not synced.
	count atomic.Int32
	// m counts the collector's calls (upstream's lease_* metrics); set by
	// New, nil before.
	m *metrics
}

// NewLeasePublisher publishes in namespace with labelSpec (upstream's
// --lease-label, e.g. "k8s-app=konnectivity-server").
func NewLeasePublisher(client kubernetes.Interface, namespace, labelSpec, serverID string, static int) (*LeasePublisher, error) {
	set, err := labels.ConvertSelectorToLabelsMap(labelSpec)
	if err != nil || len(set) == 0 {
		return nil, fmt.Errorf("--lease-label %q: want key=value[,key=value] (%v)", labelSpec, err)
	}
	p := &LeasePublisher{client: client, namespace: namespace, selector: labels.SelectorFromSet(set), labels: set,
		serverID: serverID, static: static, now: time.Now}
	p.count.Store(int32(max(static, 1)))
	return p, nil
}

// Count is the number of live servers, at least --server-count and 1.
func (p *LeasePublisher) Count() int {
	if l := p.lister.Load(); l != nil {
		if leases, err := (*l).List(p.selector); err == nil {
			items := make([]coordinationv1.Lease, len(leases))
			for i, l := range leases {
				items[i] = *l
			}
			return CountServers(items, p.now(), p.static)
		}
	}
	return int(p.count.Load())
}

// Run renews, collects and counts until ctx is done, then deletes this
// server's Lease so the others' count drops at once.
func (p *LeasePublisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("lease", p.namespace+"/"+LeaseName(p.serverID))
	factory := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithNamespace(p.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = p.selector.String() }))
	leaseInformer := factory.Coordination().V1().Leases()
	lister := leaseInformer.Lister().Leases(p.namespace)
	leaseInformer.Informer() // registered before Start
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), leaseInformer.Informer().HasSynced) {
			p.lister.Store(&lister)
		}
	}()
	renew := time.NewTicker(LeaseRenewalInterval)
	defer renew.Stop()
	for {
		if err := p.renew(ctx); err != nil {
			logger.Error(err, "Cannot renew the proxy server's Lease; agents keep the last server count", "count", p.Count())
		}
		if err := p.collect(ctx); err != nil {
			logger.V(2).Info("Cannot count proxy server Leases", "err", err)
		}
		select {
		case <-ctx.Done():
			del, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := p.client.CoordinationV1().Leases(p.namespace).Delete(del, LeaseName(p.serverID), metav1.DeleteOptions{})
			cancel()
			if err != nil && !apierrors.IsNotFound(err) {
				logger.V(1).Info("Cannot delete the proxy server's Lease at shutdown; it expires", "err", err)
			}
			return
		case <-renew.C:
		}
	}
}

func (p *LeasePublisher) renew(ctx context.Context) error {
	leases := p.client.CoordinationV1().Leases(p.namespace)
	now := metav1.NewMicroTime(p.now())
	l, err := leases.Get(ctx, LeaseName(p.serverID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName(p.serverID), Namespace: p.namespace, Labels: p.labels},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(p.serverID), LeaseDurationSeconds: ptr.To(int32(LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime, l.Spec.HolderIdentity = &now, ptr.To(p.serverID)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(LeaseDuration / time.Second))
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// collect deletes expired server Leases (a server that died without
// deleting its own) and counts the valid ones.
func (p *LeasePublisher) collect(ctx context.Context) error {
	start := time.Now()
	list, err := p.client.CoordinationV1().Leases(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector.String()})
	if p.m != nil {
		p.m.leaseCall(p.m.leaseLists, p.m.leaseListTime, err, time.Since(start))
	}
	if err != nil {
		return err
	}
	now := p.now()
	for i := range list.Items {
		l := &list.Items[i]
		if netproxy.LeaseValid(l, now) {
			continue
		}
		// Only if it is still the expired version: a server that renewed
		// it meanwhile keeps it.
		start := time.Now()
		err := p.client.CoordinationV1().Leases(p.namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if p.m != nil {
			p.m.leaseCall(p.m.leaseDeletes, p.m.leaseDeleteTime, err, time.Since(start))
			if err == nil {
				p.m.culledLeases.Inc()
			}
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	p.count.Store(int32(CountServers(list.Items, now, p.static)))
	return nil
}
