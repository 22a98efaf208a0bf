package lkg

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/test/upstreame2e"
)

// TestMatrixOnPinnedRelease checks the machinery of `make lkg` on the
// pinned release only (the whole matrix takes about an hour a release):
// real nodes at the release hack/lkg-tools.sh gives, Portside's CCM and
// test/brokenccm broken from this release on, a few conformance tests and
// one upstream e2e spec of that release's e2e.test in each cell, then the
// report against a previous one in which broken-ccm passed here and had
// v1.36.3 as its last known good: broken-ccm fails with the tests its
// break fails, the change is the signal (NewFailure), and its last known
// good stays v1.36.3; Portside's own passes.
func TestMatrixOnPinnedRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real nodes; skipped with -short")
	}
	vpctest.RequireRoot(t)
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, err := tools.ReadVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	k := v.Kube
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for pkg, out := range map[string]string{"./cmd/portside": "portside", "./test/brokenccm": "brokenccm"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, out), filepath.Join(root, pkg)).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	broken := filepath.Join(dir, "broken")
	minor := k[:strings.LastIndex(k, ".")]
	e2e := upstreame2e.Run{Name: "lkg-check", Provider: "local",
		Focus: []string{`LoadBalancers .*should handle load balancer cleanup finalizer for service`}}
	o := Options{
		Root: root, Portside: filepath.Join(bin, "portside"), Kubernetes: []string{k}, Nodes: 2,
		Providers: []Provider{
			{Name: "local", CCM: "Portside's CCM"},
			{Name: "broken-ccm", CCM: "test/brokenccm", CCMBinary: filepath.Join(bin, "brokenccm"),
				Env:        []string{"PORTSIDE_BROKEN_FILE=" + broken, "PORTSIDE_BROKEN_SINCE=" + minor},
				BrokenFile: broken, Broken: "lb-backends,routes", NoE2E: "as make lkg runs it"},
		},
		ConformanceFocus: `^(nodes/initialized|routes/pod-cidrs|load-balancers/ingress-and-traffic)$`,
		E2E:              &e2e, OutDir: filepath.Join(dir, "out"), Out: testWriter{t},
	}
	r := RunMatrix(context.Background(), o)
	prev := &Report{Started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Kubernetes: []string{"v1.36.3", k},
		Cells: []Cell{
			{Provider: "local", Kubernetes: k, Verdict: Passed, Tests: []Test{{Suite: "conformance", Name: "routes/pod-cidrs", Status: Passed}}},
			{Provider: "broken-ccm", Kubernetes: k, Verdict: Passed, Tests: []Test{{Suite: "conformance", Name: "routes/pod-cidrs", Status: Passed},
				{Suite: "conformance", Name: "load-balancers/ingress-and-traffic", Status: Passed}}},
		},
		LastKnownGood: map[string]LKG{"local": {Version: k, From: "this report"}, "broken-ccm": {Version: "v1.36.3", From: "this report"}}}
	r.Compare(prev)
	var md strings.Builder
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", md.String())
	if err := r.Write(filepath.Join(dir, "report.json")); err != nil {
		t.Fatal(err)
	}
	if back, err := ReadReport(filepath.Join(dir, "report.json")); err != nil || len(back.Cells) != 2 {
		t.Fatalf("report.json read back: %v, %v", back, err)
	}

	// broken-ccm runs the conformance suite only (NoE2E), as in make lkg.
	local, _ := r.Cell("local", k)
	if local.Verdict != Passed || len(local.Tests) != 4 {
		t.Errorf("local on %s: %s with %d tests (%v), want passed with 3 conformance tests and 1 e2e spec: %s", k, local.Verdict, len(local.Tests), local.Tests, local.Error)
	}
	b, _ := r.Cell("broken-ccm", k)
	wantFailed := []string{"conformance: load-balancers/ingress-and-traffic", "conformance: routes/pod-cidrs"}
	if got := slices.Sorted(slices.Values(FailedTests(b))); b.Verdict != Failed || !slices.Equal(got, wantFailed) {
		t.Errorf("broken-ccm on %s: %s, failed %v, want failed %v (%s)", k, b.Verdict, got, wantFailed, b.Error)
	}
	if got := r.LastKnownGood["broken-ccm"]; got.Version != "v1.36.3" {
		t.Errorf("broken-ccm's last known good %+v, want v1.36.3 (unchanged)", got)
	}
	if got := r.LastKnownGood["local"]; got.Version != k || got.From != "this report" {
		t.Errorf("local's last known good %+v, want %s from this report", got, k)
	}
	var signal []Change
	for _, c := range r.Changes {
		if c.Kind == NewFailure {
			signal = append(signal, c)
		}
	}
	if len(signal) != 1 || signal[0].Provider != "broken-ccm" || !slices.Equal(slices.Sorted(slices.Values(signal[0].Tests)), wantFailed) {
		t.Errorf("changes %+v, want one NewFailure of broken-ccm with %v", r.Changes, wantFailed)
	}
	for _, c := range r.Cells {
		if _, e2e := c.Seconds["e2e"]; c.Seconds["up"] == 0 || c.Seconds["conformance"] == 0 || e2e != (c.Provider == "local") {
			t.Errorf("%s: phases not timed: %v", c.Provider, c.Seconds)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
