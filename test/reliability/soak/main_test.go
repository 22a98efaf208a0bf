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
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
	buildOut  []byte
)

// portsideBinary builds cmd/portside once per test binary (so -count=2
// builds once) and returns its path.
func portsideBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := tools.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "portside-soak-bin-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "portside")
		cmd := exec.Command("go", "build", "-o", buildBin, "./cmd/portside")
		cmd.Dir = root
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/portside: %v\n%s", buildErr, buildOut)
	}
	return buildBin
}
