// The subset runs in `make test` (which builds e2e.test and ginkgo by
// `make e2e-tools` first); the whole LoadBalancer run is `make
// e2e-upstream` (docs/conformance.md).

package upstreame2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/testskip"
	"github.com/portside-io/portside/internal/tools"
)

// TestUpstreamLoadBalancerSubset runs the "subset" run of runs.yaml, a few
// of Kubernetes' own LoadBalancer specs, against `portside up` with two
// real nodes, dual-stack (the run's ipFamily): session affinity through
// the VIP, UDP kept while its server pod moves, ETP=Local through all
// nodes with endpoints, the cleanup finalizer, ..., and five of the
// [Feature:IPv6DualStack] specs. Every spec of
// the subset must run and pass (none skipped); a regression of the CCM's
// service controller, the local cloud's load balancers or the real-node
// data plane fails it. e2e.test and ginkgo come from `make e2e-tools`.
func TestUpstreamLoadBalancerSubset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real nodes and upstream's e2e suite; skipped with -short")
	}
	vpctest.RequireRoot(t)
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	e2eDir := tools.E2EDir(bin)
	ginkgo, err := tools.Path(e2eDir, tools.Ginkgo)
	if err != nil {
		testskip.Unavailable(t, "%v; run `make e2e-tools`", err)
	}
	e2eTest, err := tools.Path(e2eDir, tools.E2ETest)
	if err != nil {
		testskip.Unavailable(t, "%v; run `make e2e-tools`", err)
	}
	kubectl, err := tools.Path(bin, tools.Kubectl)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load("runs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run, err := f.Find("subset")
	if err != nil {
		t.Fatal(err)
	}

	portside := filepath.Join(t.TempDir(), "portside")
	if out, err := exec.Command("go", "build", "-o", portside, filepath.Join(root, "cmd", "portside")).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx := context.Background()
	began := time.Now()
	var extra []string
	if run.IPFamily != "" {
		extra = append(extra, "--ip-family="+run.IPFamily)
	}
	up, err := StartUp(ctx, portside, root, filepath.Join(t.TempDir(), "up"), 2, extra...)
	if up != nil {
		t.Cleanup(func() {
			if err := up.Stop(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("portside up ready after %v", time.Since(began).Round(time.Millisecond))

	reports := t.TempDir()
	results, images, err := RunSuite(ctx, SuiteOptions{
		Ginkgo: ginkgo, E2ETest: e2eTest, Kubectl: kubectl, Kubeconfig: up.Kubeconfig(),
		Run: run, ReportDir: reports, Nodes: 2, Timeout: 20 * time.Minute, Out: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sum strings.Builder
	_ = WriteTable(&sum, results)
	t.Logf("summary (%v):\n%s", time.Since(began).Round(time.Second), sum.String())
	// Each focus names one spec: all of them ran and passed.
	if c := Count(results); c.Passed != len(run.Focus) || c.Failed != 0 || c.Skipped != 0 {
		t.Errorf("want all %d specs of the subset passed, got %+v", len(run.Focus), c)
	}
	if un := f.UnlistedImages(run.Name, images); len(un) > 0 {
		t.Errorf("the specs' pods named images runs.yaml does not list: %q", un)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}
