package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/controllers/podcidr"
	"github.com/portside-io/portside/pkg/cloud"
)

// syncNode makes one node's routes right against the cache.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("node", name)
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(name)
		return c.deleteRoutesTo(ctx, name)
	}
	if err != nil {
		return err
	}
	cidrs, err := podcidr.Parse(node.Spec.PodCIDRs)
	if err != nil || len(cidrs) == 0 {
		// No pod CIDR (yet, or again after the node was recreated): no
		// condition, as upstream, and no route to it.
		c.forget(name)
		return c.deleteRoutesTo(ctx, name)
	}
	plan := PlanNode(cidrs, node.Status.Addresses, c.cache.routesTo(name), c.cfg.ClusterCIDRs)
	for _, r := range plan.Delete {
		if err := c.delete(ctx, r); err != nil {
			c.setCreated(node, false)
			return err
		}
	}
	var errs []error
	for _, cidr := range plan.Create {
		start := time.Now()
		err := c.cfg.Routes.CreateRoute(ctx, c.cfg.ClusterName, string(node.UID), cloud.Route{TargetNode: name, DestinationCIDR: cidr,
			TargetNodeAddresses: node.Status.Addresses, ClusterUID: c.cfg.ClusterUID})
		c.metrics.op("create", err)
		if err != nil {
			c.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonFailedToCreateRoute,
				"Could not create route %s %s for node %s after %v: %v", node.UID, cidr, name, time.Since(start).Round(time.Millisecond), err)
			errs = append(errs, fmt.Errorf("create route for %s: %w", cidr, err))
			continue
		}
		c.cache.added(name, cidr, node.Status.Addresses)
		logger.V(2).Info("Created route", "cidr", cidr)
	}
	c.setCreated(node, len(errs) == 0)
	if len(errs) == 1 {
		return errs[0] // keeps a retry-after delay visible to the queue
	}
	return errors.Join(errs...)
}

// deleteRoutesTo deletes the cluster's routes to a node.
func (c *Controller) deleteRoutesTo(ctx context.Context, node string) error {
	var errs []error
	for _, r := range c.cache.routesTo(node) {
		if Responsible(r.DestinationCIDR, c.cfg.ClusterCIDRs) {
			errs = append(errs, c.delete(ctx, r))
		}
	}
	return errors.Join(errs...)
}

// delete deletes a route, first learning its cloud name if this controller
// created it since the last list.
func (c *Controller) delete(ctx context.Context, r cloud.Route) error {
	node, dst := r.TargetNode, r.DestinationCIDR.Masked()
	if r.Name == "" {
		named, ok, err := c.cache.resolve(ctx, node, dst, c.list)
		if err != nil {
			return err
		}
		if !ok { // a list that started after its creation does not show it: gone
			c.cache.removed(node, dst)
			return nil
		}
		r = named
	}
	err := c.cfg.Routes.DeleteRoute(ctx, c.cfg.ClusterName, r)
	c.metrics.op("delete", err)
	if err != nil {
		return fmt.Errorf("delete route %s %s: %w", r.Name, r.DestinationCIDR, err)
	}
	c.cache.removed(node, dst)
	klog.FromContext(ctx).V(2).Info("Deleted route", "route", r.Name, "cidr", r.DestinationCIDR, "target", r.TargetNode, "blackhole", r.Blackhole)
	return nil
}

// syncStatus writes the NetworkUnavailable condition a node should have.
func (c *Controller) syncStatus(ctx context.Context, name string) error {
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	status, reason, known := c.desiredCondition(node)
	if !known || !c.conditionOutdated(node) {
		return nil
	}
	msg := "RouteController created a route"
	if status == corev1.ConditionTrue {
		msg = "RouteController failed to create a route"
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeNetworkUnavailable, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: now, LastHeartbeatTime: now,
	}}}})
	_, err = c.cfg.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
