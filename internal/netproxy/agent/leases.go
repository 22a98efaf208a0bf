package agent

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1listers "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// leaseResync is upstream's agent lease informer resync: every Lease is
// seen again that often, so a Lease that expires without an event (its
// server died without deleting it) stops counting within it.
const leaseResync = 10 * time.Second

// leaseCounter watches the servers' Leases (--count-server-leases).
type leaseCounter struct {
	informer cache.SharedIndexInformer
	lister   coordinationv1listers.LeaseNamespaceLister
	selector labels.Selector
	synced   atomic.Bool
}

// newLeaseCounter lists and watches Leases in namespace matching selector,
// counting the calls in upstream's lease metrics; onChange is called on
// every event (and resync) so the agent decides its count again.
func newLeaseCounter(client kubernetes.Interface, namespace string, selector labels.Selector, m *metrics, onChange func()) *leaseCounter {
	leases := client.CoordinationV1().Leases(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector.String()
			start := time.Now()
			list, err := leases.List(ctx, o)
			code, reason := apiStatus(err)
			m.leaseListLatency.WithLabelValues(strconv.Itoa(code)).Observe(time.Since(start).Seconds())
			m.leaseLists.WithLabelValues(strconv.Itoa(code), reason).Inc()
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector.String()
			w, err := leases.Watch(ctx, o)
			code, reason := apiStatus(err)
			// Upstream counts watches in lease_lists_total by mistake;
			// here they are in lease_watches_total, as its help says.
			m.leaseWatches.WithLabelValues(strconv.Itoa(code), reason).Inc()
			return w, err
		},
	}
	inf := cache.NewSharedIndexInformer(plainList{lw}, &coordinationv1.Lease{}, leaseResync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	notify := func(any) { onChange() }
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: notify, DeleteFunc: notify,
		UpdateFunc: func(any, any) { onChange() }})
	return &leaseCounter{informer: inf, lister: coordinationv1listers.NewLeaseLister(inf.GetIndexer()).Leases(namespace), selector: selector}
}

// plainList makes the reflector LIST then WATCH, as upstream's agent
// (client-go v0.34) does, rather than stream the list in a watch: the
// lists are what lease_lists_total and lease_list_latency_seconds count.
type plainList struct{ *cache.ListWatch }

func (plainList) IsWatchListSemanticsUnSupported() bool { return true }

// run watches until ctx ends. Unlike upstream's agent, which connects to no
// server before the Lease list succeeds, the agent serves meanwhile
// through the servers it reaches (counting 1).
func (c *leaseCounter) run(ctx context.Context, onSynced func()) {
	go c.informer.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		c.synced.Store(true)
		onSynced()
	}
}

// count is the number of valid server Leases now (1 before the first
// list).
func (c *leaseCounter) count(now time.Time) int {
	if !c.synced.Load() {
		return 1
	}
	leases, err := c.lister.List(c.selector)
	if err != nil {
		return 1
	}
	return leaseCount(leases, now)
}

// apiStatus is the HTTP code and reason of an apiserver call's result, as
// upstream's lease metrics label them (200 and "" on success).
func apiStatus(err error) (int, string) {
	if err == nil {
		return 200, ""
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return int(st.Status().Code), string(st.Status().Reason)
	}
	return 0, "Unknown"
}
