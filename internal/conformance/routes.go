package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReasonRouteCreated is the NetworkUnavailable=False reason of upstream's
// route controller.
const ReasonRouteCreated = "RouteCreated"

// routesTimeout bounds the wait for routes of freshly allocated CIDRs.
const routesTimeout = time.Minute

func routesTest() Test {
	return Test{
		Name:    "routes/pod-cidrs",
		Needs:   []Capability{Routes},
		Timeout: 2 * time.Minute,
		Run: func(ctx context.Context, t *T) {
			if t.Env.Cloud != nil {
				// A node that joins now gets a pod CIDR and its route, not
				// only the nodes that were there before.
				tn := newTestNode(ctx, t, "route")
				tn.waitInitialized(ctx, t)
				t.Eventually(ctx, routesTimeout, "a pod CIDR for the new node "+tn.name, func(ctx context.Context) (bool, string) {
					n, err := t.Env.Client.CoreV1().Nodes().Get(ctx, tn.name, metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					return len(n.Spec.PodCIDRs) > 0, "spec.podCIDRs is empty"
				})
			}
			checked := 0
			t.Eventually(ctx, routesTimeout, "a route and NetworkUnavailable=False (RouteCreated) for every node's pod CIDRs", func(ctx context.Context) (bool, string) {
				problems, n, err := routeProblems(ctx, t.Env)
				if err != nil {
					return false, err.Error()
				}
				checked = n
				return len(problems) == 0, strings.Join(problems, "; ")
			})
			if checked == 0 {
				t.Fatalf("no node has spec.podCIDRs: routes need pod CIDRs (the CCM's --allocate-node-cidrs, or kube-controller-manager's)")
			}
			where := "the cluster"
			if t.Env.Cloud != nil {
				where = "the cluster and the cloud"
			}
			t.Logf("%d nodes with pod CIDRs have their routes in %s", checked, where)
		},
	}
}

// routeProblems checks every node with pod CIDRs: NetworkUnavailable is
// False with reason RouteCreated, and, with the local cloud, the cloud has
// a route to the node for each CIDR.
func routeProblems(ctx context.Context, env *Env) (problems []string, checked int, err error) {
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("list nodes: %w", err)
	}
	routes := map[string]string{} // destination CIDR → target node
	if env.Cloud != nil {
		rs, err := env.Cloud.ListRoutes(ctx, "")
		if err != nil {
			return nil, 0, fmt.Errorf("list the cloud's routes: %w", err)
		}
		for _, r := range rs {
			if !r.Blackhole {
				routes[r.DestinationCIDR] = r.TargetNode
			}
		}
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if len(n.Spec.PodCIDRs) == 0 || n.DeletionTimestamp != nil {
			continue
		}
		checked++
		c := condition(n, corev1.NodeNetworkUnavailable)
		switch {
		case c == nil:
			problems = append(problems, fmt.Sprintf("node %s has no NetworkUnavailable condition", n.Name))
		case c.Status != corev1.ConditionFalse || c.Reason != ReasonRouteCreated:
			problems = append(problems, fmt.Sprintf("node %s: NetworkUnavailable=%s reason %q (%s), want False reason %s", n.Name, c.Status, c.Reason, c.Message, ReasonRouteCreated))
		}
		if env.Cloud == nil {
			continue
		}
		for _, cidr := range n.Spec.PodCIDRs {
			switch target, ok := routes[cidr]; {
			case !ok:
				problems = append(problems, fmt.Sprintf("node %s: the cloud has no route for pod CIDR %s", n.Name, cidr))
			case target != n.Name:
				problems = append(problems, fmt.Sprintf("node %s: the cloud's route for pod CIDR %s targets %q", n.Name, cidr, target))
			}
		}
	}
	return problems, checked, nil
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
