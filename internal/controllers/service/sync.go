package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud"
)

// sync brings one Service's load balancer to what the Service wants.
// It acts only on what is provably ours: Services of our class, and load
// balancers this controller made (its memory) or that carry our tags.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return c.serviceGone(ctx, key)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	prev, had := c.state[key]
	c.mu.Unlock()
	if had && prev.spec.UID != svc.UID {
		// Recreated under the same name: the old UID's load balancer was
		// ours and its Service is gone.
		if err := c.serviceGone(ctx, key); err != nil {
			return err
		}
		had = false
	}
	owner := c.ownership(svc)
	switch {
	case NeedsCleanup(svc, c.cfg.Class, owner):
		return c.cleanup(ctx, key, svc)
	case WantsLoadBalancer(svc, c.cfg.Class):
		return c.ensure(ctx, key, svc)
	case had && svc.Spec.Type != corev1.ServiceTypeLoadBalancer:
		// We made its load balancer, but its finalizer was removed by hand
		// and it no longer wants one.
		return c.serviceGone(ctx, key)
	}
	return nil
}

// serviceGone deletes the load balancer this controller made for a Service
// that is gone, or recreated, without our finalizer running (e.g. removed
// by hand); the orphan collector covers the case where this CCM never saw it.
func (c *Controller) serviceGone(ctx context.Context, key string) error {
	c.mu.Lock()
	st, ok := c.state[key]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if err := c.cfg.LoadBalancers.EnsureLoadBalancerDeleted(ctx, st.spec); err != nil && !errors.Is(err, cloud.ErrImplementedElsewhere) {
		return err
	}
	c.forget(key, st.spec.UID)
	klog.FromContext(ctx).Info("Deleted the load balancer of a deleted Service", "service", key, "loadBalancer", st.spec.Name, "uid", st.spec.UID)
	return nil
}

func (c *Controller) forget(key string, uid types.UID) {
	c.mu.Lock()
	if st, ok := c.state[key]; ok && st.spec.UID == uid {
		delete(c.state, key)
	}
	delete(c.owner, uid)
	c.mu.Unlock()
}

// cleanup deletes the load balancer, clears the status (ingress and our
// condition) and removes the finalizer.
func (c *Controller) cleanup(ctx context.Context, key string, svc *corev1.Service) error {
	spec := identitySpec(c.cfg.ClusterName, c.cfg.ClusterUID, svc)
	c.cfg.Recorder.Event(svc, corev1.EventTypeNormal, ReasonDeletingLoadBalancer, "Deleting load balancer")
	if err := c.cfg.LoadBalancers.EnsureLoadBalancerDeleted(ctx, spec); err != nil && !errors.Is(err, cloud.ErrImplementedElsewhere) {
		c.cfg.Recorder.Eventf(svc, corev1.EventTypeWarning, ReasonDeleteLoadBalancerFailed, "Error deleting load balancer: %v", err)
		return err
	}
	if err := c.release(ctx, svc); err != nil {
		return err
	}
	c.forget(key, svc.UID)
	c.cfg.Recorder.Event(svc, corev1.EventTypeNormal, ReasonDeletedLoadBalancer, "Deleted load balancer")
	return nil
}

// identitySpec is enough of a spec to find and delete a load balancer,
// for Services that are no longer valid LoadBalancer Services.
func identitySpec(cluster string, clusterUID types.UID, svc *corev1.Service) *cloud.LoadBalancerSpec {
	if spec, err := cloud.SpecFromService(cluster, svc); err == nil {
		spec.ClusterUID = clusterUID
		return spec
	}
	class := ""
	if svc.Spec.LoadBalancerClass != nil {
		class = *svc.Spec.LoadBalancerClass
	}
	return &cloud.LoadBalancerSpec{Cluster: cluster, ClusterUID: clusterUID, Name: cloud.LoadBalancerName(svc.UID), Class: class,
		Service: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, UID: svc.UID, Object: svc}
}

// ensure creates or updates the load balancer: nothing when neither the
// Service nor the host set changed since the last sync, only the hosts
// when only they changed, a full ensure otherwise.
func (c *Controller) ensure(ctx context.Context, key string, svc *corev1.Service) error {
	spec, err := cloud.SpecFromService(c.cfg.ClusterName, svc)
	if err != nil {
		return c.failTerminal(ctx, svc, ReasonInvalidService, err.Error())
	}
	spec.ClusterUID = c.cfg.ClusterUID
	if why := Unsupported(spec, c.features); why != "" {
		return c.failTerminal(ctx, svc, ReasonUnsupportedService, why)
	}
	hosts, hostsHash := c.currentHosts()
	specHash := SpecHash(spec)
	c.mu.Lock()
	prev, had := c.state[key]
	c.mu.Unlock()
	if had && prev.spec.UID == spec.UID && prev.specHash == specHash && prev.hostsHash == hostsHash {
		return nil // the cloud already has exactly this
	}
	// From here on the load balancer may exist: it is ours to clean up.
	c.setOwnership(svc.UID, OwnershipOurs)
	if !HasFinalizer(svc) {
		if err := c.patchFinalizers(ctx, svc, append(slices.Clone(svc.Finalizers), FinalizerCleanup)); err != nil {
			return err
		}
	}
	if len(hosts) == 0 {
		c.cfg.Recorder.Event(svc, corev1.EventTypeWarning, ReasonUnAvailableLoadBalancer, "There are no available nodes for LoadBalancer")
	}
	if had && prev.spec.UID == spec.UID && prev.specHash == specHash {
		if err := c.changeHosts(ctx, spec, prev.hosts, hosts); err != nil {
			if errors.Is(err, cloud.ErrImplementedElsewhere) {
				return nil
			}
			if cloud.IsNotFound(err) {
				// Gone from the cloud: the retry ensures it in full.
				c.forgetSynced(key)
			}
			c.cfg.Recorder.Eventf(svc, corev1.EventTypeWarning, ReasonUpdateLoadBalancerFailed, "Error updating load balancer with new hosts %d: %v", len(hosts), err)
			return err
		}
		c.cfg.Recorder.Eventf(svc, corev1.EventTypeNormal, ReasonUpdatedLoadBalancer, "Updated load balancer with new hosts (%d)", len(hosts))
		c.remember(key, spec, specHash, hostsHash, hosts)
		return nil
	}
	c.cfg.Recorder.Event(svc, corev1.EventTypeNormal, ReasonEnsuringLoadBalancer, "Ensuring load balancer")
	status, err := c.cfg.LoadBalancers.EnsureLoadBalancer(ctx, spec, hosts)
	if err != nil {
		if errors.Is(err, cloud.ErrImplementedElsewhere) {
			return nil
		}
		c.cfg.Recorder.Eventf(svc, corev1.EventTypeWarning, ReasonSyncLoadBalancerFailed, "Error syncing load balancer: %v", err)
		if _, retry := cloud.IsRetryAfter(err); !retry {
			_ = c.patchStatus(ctx, svc, nil, &metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse,
				Reason: ReasonCloudError, Message: truncate(err.Error())})
		}
		return err
	}
	if why := UsableStatus(status); why != "" {
		c.cfg.Recorder.Eventf(svc, corev1.EventTypeWarning, ReasonSyncLoadBalancerFailed, "Error syncing load balancer: %s; retrying", why)
		return errors.New(why) // retried with backoff, not recorded ready
	}
	cond := &metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionTrue, Reason: ReasonProvisioned, Message: "The load balancer serves the Service"}
	if err := c.patchStatus(ctx, svc, status, cond); err != nil {
		return err
	}
	c.cfg.Recorder.Event(svc, corev1.EventTypeNormal, ReasonEnsuredLoadBalancer, "Ensured load balancer")
	c.remember(key, spec, specHash, hostsHash, hosts)
	return nil
}

func (c *Controller) remember(key string, spec *cloud.LoadBalancerSpec, specHash, hostsHash string, hosts []cloud.Host) {
	c.mu.Lock()
	c.state[key] = synced{spec: spec, specHash: specHash, hostsHash: hostsHash, hosts: hosts}
	c.mu.Unlock()
}

// forgetSynced drops what the cloud is known to have for key: the next
// sync ensures the load balancer in full.
func (c *Controller) forgetSynced(key string) {
	c.mu.Lock()
	delete(c.state, key)
	c.mu.Unlock()
}

// failTerminal reports a Service that cannot get a load balancer until it
// is changed: an event and the condition, and no retry (a change to the
// Service queues it again).
func (c *Controller) failTerminal(ctx context.Context, svc *corev1.Service, reason, msg string) error {
	c.cfg.Recorder.Eventf(svc, corev1.EventTypeWarning, ReasonSyncLoadBalancerFailed, "%s: %s", reason, msg)
	return c.patchStatus(ctx, svc, nil, &metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: reason, Message: truncate(msg)})
}

func truncate(s string) string {
	if len(s) > 1000 {
		return s[:1000]
	}
	return s
}

// patchStatus writes the load-balancer status and/or the condition, only
// when they differ from the Service's.
func (c *Controller) patchStatus(ctx context.Context, svc *corev1.Service, lb *corev1.LoadBalancerStatus, cond *metav1.Condition) error {
	st := map[string]any{}
	if lb != nil && !StatusEqual(&svc.Status.LoadBalancer, lb) {
		st["loadBalancer"] = lb
	}
	if cond != nil {
		conds := slices.Clone(svc.Status.Conditions)
		cur := meta.FindStatusCondition(conds, cond.Type)
		if cur == nil || cur.Status != cond.Status || cur.Reason != cond.Reason || cur.Message != cond.Message {
			cond.ObservedGeneration = svc.Generation
			meta.SetStatusCondition(&conds, *cond)
			st["conditions"] = conds
		}
	}
	if len(st) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"status": st})
	_, err := c.cfg.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

// patchFinalizers replaces the finalizer list, guarded by resourceVersion.
// As upstream, through the status subresource (which keeps metadata
// changes): the apiserver's bootstrap role for service-controller, used
// with --use-service-account-credentials, grants patch on services/status
// only, and so does deploy/ccm.
func (c *Controller) patchFinalizers(ctx context.Context, svc *corev1.Service, finalizers []string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": svc.ResourceVersion}})
	_, err := c.cfg.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch finalizers: %w", err)
	}
	return nil
}

// release clears the status (ingress and our condition) and removes the
// finalizer in one write through services/status, which keeps metadata
// changes (as upstream's finalizer patches): one write, and no conflict
// between two. A merge patch of an empty loadBalancer object would leave
// the ingress in place: it is set to null explicitly.
func (c *Controller) release(ctx context.Context, svc *corev1.Service) error {
	st := map[string]any{}
	if len(svc.Status.LoadBalancer.Ingress) > 0 {
		st["loadBalancer"] = map[string]any{"ingress": nil}
	}
	if meta.FindStatusCondition(svc.Status.Conditions, ConditionLoadBalancerReady) != nil {
		conds := slices.Clone(svc.Status.Conditions)
		meta.RemoveStatusCondition(&conds, ConditionLoadBalancerReady)
		if len(conds) == 0 {
			st["conditions"] = nil
		} else {
			st["conditions"] = conds
		}
	}
	body := map[string]any{"metadata": map[string]any{
		"finalizers":      slices.DeleteFunc(slices.Clone(svc.Finalizers), func(f string) bool { return f == FinalizerCleanup }),
		"resourceVersion": svc.ResourceVersion,
	}}
	if len(st) > 0 {
		body["status"] = st
	}
	patch, _ := json.Marshal(body)
	_, err := c.cfg.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release the Service (status and finalizer): %w", err)
	}
	return nil
}
