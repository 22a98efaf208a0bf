package service

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud"
)

// OrphanVerdict is what orphan collection does with one cloud load balancer.
type OrphanVerdict int

const (
	// OrphanKeep: not provably ours, or still wanted.
	OrphanKeep OrphanVerdict = iota
	// OrphanDelete: ours, and the Service it was made for is gone.
	OrphanDelete
	// OrphanCleanup: ours, and its Service (same UID) no longer wants it:
	// the Service is queued for a full cleanup (load balancer, status,
	// finalizer).
	OrphanCleanup
	// OrphanDeleteOnly: ours, and its Service (same UID) turned into
	// another class's: the load balancer goes, the Service is not touched.
	OrphanDeleteOnly
)

// ProvablyOurs reports whether a listed load balancer was made by this
// cluster's controller of this class: tagged with our cluster UID and our
// class, and with the Service and UID it was made for. The cluster name
// alone is no proof (two clusters may share it), two controllers of
// different classes may share a cluster, and a load balancer without these
// tags was not made by this controller.
func ProvablyOurs(ref cloud.LoadBalancerRef, clusterUID, class string) bool {
	return clusterUID != "" && string(ref.ClusterUID) == clusterUID && ref.Class == class &&
		ref.UID != "" && ref.Service.Name != "" && ref.Service.Namespace != ""
}

// DecideOrphan decides about a load balancer of ours from a live read of its
// Service (nil: not found). Service UIDs are never reused, so a Service of
// the same name with another UID means the one it was made for is gone.
func DecideOrphan(ref cloud.LoadBalancerRef, svc *corev1.Service, class string) OrphanVerdict {
	switch {
	case svc == nil || svc.UID != ref.UID:
		return OrphanDelete
	case WantsLoadBalancer(svc, class):
		return OrphanKeep
	case HasFinalizer(svc) && (svc.Spec.Type != corev1.ServiceTypeLoadBalancer || OfClass(svc, class)):
		return OrphanCleanup
	case svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp != nil && OfClass(svc, class):
		return OrphanKeep // being deleted: its own cleanup deletes the load balancer
	default:
		return OrphanDeleteOnly
	}
}

// collectOrphans deletes, every OrphanPeriod, cloud load balancers that are
// provably this cluster's and whose Service is gone or no longer wants them.
// Every decision is made on a live read of the Service; any doubt (an API
// error, a missing tag) keeps the load balancer.
func (c *Controller) collectOrphans(ctx context.Context, lister cloud.LoadBalancerLister) {
	logger := klog.FromContext(ctx)
	untagged := map[string]bool{} // logged once each
	failures := 0
	for {
		var passErr error
		refs, err := lister.ListLoadBalancers(ctx, c.cfg.ClusterName)
		if err != nil {
			logger.Error(err, "Listing load balancers for orphan collection")
			passErr = err
		}
		for _, ref := range refs {
			if !ProvablyOurs(ref, string(c.cfg.ClusterUID), c.cfg.Class) {
				if !untagged[ref.Name] {
					untagged[ref.Name] = true
					logger.V(2).Info("Not collecting a load balancer that is not provably this cluster's", "loadBalancer", ref.Name,
						"clusterUID", ref.ClusterUID, "class", ref.Class, "service", ref.Service, "uid", ref.UID)
				}
				continue
			}
			if err := c.collectOne(ctx, ref); err != nil && passErr == nil {
				passErr = err
			}
		}
		if passErr != nil {
			failures++
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(NextOrphanPass(passErr, failures, c.cfg.OrphanPeriod)):
		}
	}
}

// NextOrphanPass is the wait before the next orphan collection: the period
// after a pass that did everything; after a failed one (the cloud's or the
// apiserver's error), a backoff from 1 s doubling per failure in a row, or
// the cloud's Retry-After, never longer than the period. An orphan left by
// a cloud failure at start is then collected once the cloud answers, not a
// period later.
func NextOrphanPass(err error, failures int, period time.Duration) time.Duration {
	if err == nil {
		return period
	}
	if d, ok := cloud.IsRetryAfter(err); ok && d > 0 {
		return min(d, period)
	}
	backoff := time.Second
	for i := 1; i < failures && backoff < period; i++ {
		backoff *= 2
	}
	return min(backoff, period)
}

// collectOne decides about one load balancer of ours and acts; an error
// (reading the Service, deleting in the cloud) makes the pass a failed one.
func (c *Controller) collectOne(ctx context.Context, ref cloud.LoadBalancerRef) error {
	logger := klog.FromContext(ctx).WithValues("loadBalancer", ref.Name, "service", ref.Service, "uid", ref.UID)
	svc, err := c.cfg.Client.CoreV1().Services(ref.Service.Namespace).Get(ctx, ref.Service.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		svc, err = nil, nil
	}
	if err != nil {
		return err // in doubt: keep it, and look again soon
	}
	switch DecideOrphan(ref, svc, c.cfg.Class) {
	case OrphanKeep:
		return nil
	case OrphanCleanup:
		c.setOwnership(svc.UID, OwnershipOurs)
		c.queue.Add(serviceKey(svc.Namespace, svc.Name))
		logger.Info("Queued the cleanup of a Service whose load balancer is ours and no longer wanted")
		return nil
	}
	spec := &cloud.LoadBalancerSpec{Cluster: c.cfg.ClusterName, ClusterUID: c.cfg.ClusterUID, Name: ref.Name, Service: ref.Service, UID: ref.UID, Class: ref.Class}
	if err := c.cfg.LoadBalancers.EnsureLoadBalancerDeleted(ctx, spec); err != nil {
		logger.Error(err, "Deleting orphaned load balancer")
		return err
	}
	logger.Info("Deleted orphaned load balancer")
	return nil
}
