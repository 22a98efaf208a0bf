package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// lbWaitLocalStreak waits for 10 requests in a row to http://hp/hostname
// answered by podName through node, its own (externalTrafficPolicy Local:
// health checks take a while to take the other nodes out of rotation,
// and they refuse or drop Local traffic), and returns the last answer.
func lbWaitLocalStreak(ctx context.Context, t *T, hp, podName, node string) httpAnswer {
	streak := 0
	var answer httpAnswer
	t.Eventually(ctx, lbTrafficTimeout, fmt.Sprintf("10 requests in a row to http://%s/hostname answered by pod %s on node %s", hp, podName, node),
		func(ctx context.Context) (bool, string) {
			a, err := lbGet(ctx, hp, "/hostname")
			msg := ""
			switch {
			case err != nil:
				msg = err.Error()
			case lbCheckServed(a, []string{podName}) != "":
				msg = lbCheckServed(a, []string{podName})
			case a.Node != "" && a.Node != node:
				msg = fmt.Sprintf("answered through node %s (X-Node), not %s where the pod runs", a.Node, node)
			}
			if msg != "" {
				streak = 0
				return false, msg
			}
			streak++
			answer = a
			return streak >= 10, ""
		})
	return answer
}

// lbWaitHealth waits (2 minutes) until the local cloud's health of load
// balancer name passes verdict (what: what the healthy backends must be)
// and logs it.
func lbWaitHealth(ctx context.Context, t *T, name, what string, verdict func(*api.LoadBalancerHealth) (bool, string)) {
	var last *api.LoadBalancerHealth
	t.Eventually(ctx, 2*time.Minute, fmt.Sprintf("the healthy backends of load balancer %s %s", name, what), func(ctx context.Context) (bool, string) {
		h, err := t.Env.Cloud.LoadBalancerHealth(ctx, name)
		if err != nil {
			return false, "load balancer health: " + err.Error()
		}
		last = h
		return verdict(h)
	})
	t.Logf("local cloud: load balancer %s backends %s", name, lbDescribeHealth(last))
}
