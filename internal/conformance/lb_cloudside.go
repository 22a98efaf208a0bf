package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// --- the local cloud ---

// lbFind returns the load balancer made for svc: tagged with its UID, or
// named after its UID as upstream's DefaultLoadBalancerName does.
func lbFind(lbs []api.LoadBalancer, svc *corev1.Service) *api.LoadBalancer {
	name := cloud.LoadBalancerName(svc.UID)
	for i := range lbs {
		if lbs[i].Tags[local.TagServiceUID] == string(svc.UID) {
			return &lbs[i]
		}
	}
	for i := range lbs {
		if lbs[i].Name == name {
			return &lbs[i]
		}
	}
	return nil
}

// lbCloud returns svc's load balancer in the local cloud, nil when none.
func lbCloud(ctx context.Context, env *Env, svc *corev1.Service) (*api.LoadBalancer, error) {
	lbs, err := env.Cloud.ListLoadBalancers(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list the local cloud's load balancers: %w", err)
	}
	return lbFind(lbs, svc), nil
}

// lbWaitCloud waits until the local cloud has svc's load balancer and cond
// holds for it; it returns the load balancer.
func lbWaitCloud(ctx context.Context, t *T, svc *corev1.Service, timeout time.Duration, what string, cond func(*api.LoadBalancer) (bool, string)) *api.LoadBalancer {
	var found *api.LoadBalancer
	t.Eventually(ctx, timeout, fmt.Sprintf("the local cloud's load balancer of Service %s/%s (uid %s) %s", svc.Namespace, svc.Name, svc.UID, what),
		func(ctx context.Context) (bool, string) {
			lb, err := lbCloud(ctx, t.Env, svc)
			if err != nil {
				return false, err.Error()
			}
			if lb == nil {
				return false, fmt.Sprintf("no load balancer tagged %s=%s or named %s", local.TagServiceUID, svc.UID, cloud.LoadBalancerName(svc.UID))
			}
			found = lb
			if cond == nil {
				return true, ""
			}
			return cond(lb)
		})
	return found
}

// lbListener returns the load balancer's listener of proto and port.
func lbListener(lb *api.LoadBalancer, proto corev1.Protocol, port int32) (api.Listener, bool) {
	for _, l := range lb.Listeners {
		if strings.EqualFold(l.Protocol, string(proto)) && l.Port == int(port) {
			return l, true
		}
	}
	return api.Listener{}, false
}

// lbCheckListeners says which of the Service's ports the load balancer
// lacks a listener for, forwarding to the port's NodePort ("" if none).
func lbCheckListeners(lb *api.LoadBalancer, svc *corev1.Service) string {
	var missing []string
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		l, ok := lbListener(lb, proto, sp.Port)
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("no %s/%d listener", proto, sp.Port))
		case sp.NodePort != 0 && l.BackendPort != int(sp.NodePort):
			missing = append(missing, fmt.Sprintf("%s/%d listener forwards to port %d, not NodePort %d", proto, sp.Port, l.BackendPort, sp.NodePort))
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("%s; listeners %s", strings.Join(missing, ", "), lbDescribeListeners(lb))
}

func lbDescribeListeners(lb *api.LoadBalancer) string {
	var ls []string
	for _, l := range lb.Listeners {
		ls = append(ls, fmt.Sprintf("%s/%d→%d", l.Protocol, l.Port, l.BackendPort))
	}
	return "[" + strings.Join(ls, " ") + "]"
}

// lbBackendNames are the node names of a load balancer's backends.
func lbBackendNames(lb *api.LoadBalancer) []string {
	var names []string
	for _, b := range lb.Backends {
		if !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	sort.Strings(names)
	return names
}

// lbHealthyNames are the backends the data plane sends traffic to: checked
// at least once, healthy and not draining.
func lbHealthyNames(h *api.LoadBalancerHealth) []string {
	var names []string
	for _, b := range h.Backends {
		if b.Healthy && !b.Draining && !b.LastChecked.IsZero() && !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	sort.Strings(names)
	return names
}

// lbDescribeHealth shows each backend's health for a failure message.
func lbDescribeHealth(h *api.LoadBalancerHealth) string {
	var parts []string
	for _, b := range h.Backends {
		s := fmt.Sprintf("%s healthy=%v", b.Name, b.Healthy)
		if b.Draining {
			s += " draining"
		}
		if b.LastChecked.IsZero() {
			s += " unchecked"
		}
		if b.LastError != "" {
			s += " (" + b.LastError + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
