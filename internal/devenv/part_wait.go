package devenv

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitNodesInitialized waits until the CCM has initialized every simulated
// node (providerID set, uninitialized taint gone, pod CIDRs assigned and
// routed), reporting progress for large clusters and, on timeout, why a
// node is not there yet.
func waitNodesInitialized(ctx context.Context, s *stack, env *environment) error {
	began := time.Now()
	timeout := 2*time.Minute + time.Duration(len(env.nodes))*100*time.Millisecond
	lastReport := began
	for {
		list, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: env.nodeSelector()})
		if err != nil {
			return err
		}
		done, waiting := 0, ""
		for i := range list.Items {
			n := &list.Items[i]
			ok, why := nodeInitialized(n)
			if route := routeState(n); ok && route != "routed" {
				ok, why = false, "no route yet"
				if len(n.Spec.PodCIDRs) == 0 {
					why = "no pod CIDR yet"
				} else if route != "" {
					why = "no route yet: " + route
				}
			}
			if ok {
				done++
			} else if waiting == "" {
				waiting = n.Name + ": " + why
			}
		}
		if done >= len(env.nodes) {
			s.p.step("nodes", "%d/%d initialized by the ccm in %.1fs (zones and providerIDs set, taint removed, pod CIDRs from %s routed in the cloud)", done, len(env.nodes), time.Since(began).Seconds(), env.podCIDR())
			return nil
		}
		if time.Since(began) > timeout {
			return fmt.Errorf("%d/%d initialized after %v; e.g. %s (see %s)", done, len(env.nodes), timeout, waiting, env.logs())
		}
		if time.Since(lastReport) >= 5*time.Second {
			s.p.step("nodes", "%d/%d initialized", done, len(env.nodes))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
