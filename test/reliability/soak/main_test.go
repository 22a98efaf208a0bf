// Package soak is the reliability soak of issue 18: the real `portside ccm`
// binary, killed with SIGKILL every period and restarted under leader
// election, against a real kube-apiserver (testenv) and a local cloud that
// fails a share of its requests (500s, and 429s with Retry-After), while
// nodes and LoadBalancer Services churn. After the soak the faults are
// cleared, churn and kills stop, and the test measures how long the cluster
// takes to converge and proves: no load balancer leaked, no node deleted
// while its instance existed, every Service has its ingress and a load
// balancer with exactly the cluster's nodes, routes match pod CIDRs.
//
// Short mode (the default, run by `make test`) soaks 45 s; long mode
// (PORTSIDE_SOAK=long or -soak.mode=long) soaks 10 minutes. See
// docs/reliability.md.
package soak

import (
	"os"
	"testing"

	"github.com/portside-io/portside/internal/testbin"
	"github.com/portside-io/portside/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	testbin.Cleanup()
	os.Exit(code)
}

// portsideBinary is the portside binary (internal/testbin).
func portsideBinary(t *testing.T) string { return testbin.Portside(t) }
