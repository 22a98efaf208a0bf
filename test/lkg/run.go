package lkg

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/conformance"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/test/upstreame2e"
)

// Options say what to run.
type Options struct {
	// Root is the checkout (hack/lkg-tools.sh, up's working directory);
	// Portside the portside binary.
	Root, Portside string
	Kubernetes     []string
	Providers      []Provider
	// Nodes is the real nodes of each environment.
	Nodes int
	// ConformanceFocus is portside conformance's --focus ("" for all).
	ConformanceFocus string
	// E2E is the run of test/upstreame2e/runs.yaml to make with the
	// release's e2e.test; nil for none.
	E2E *upstreame2e.Run
	// OutDir receives each cell's reports and logs.
	OutDir string
	// Out receives progress.
	Out io.Writer
}

// RunMatrix runs every provider on every release, one environment at a
// time (two would not fit the machine's 2 cores), and returns the report
// without the comparison (see Compare).
func RunMatrix(ctx context.Context, o Options) *Report {
	r := &Report{Started: time.Now(), Kubernetes: o.Kubernetes, Providers: o.Providers}
	for _, k := range o.Kubernetes {
		began := time.Now()
		bin, err := ToolsFor(ctx, o.Root, k, o.Out)
		toolsSecs := time.Since(began).Seconds()
		for _, p := range o.Providers {
			if len(p.Releases) > 0 && !slices.Contains(p.Releases, k) {
				continue
			}
			var c Cell
			if err != nil {
				c = Cell{Provider: p.Name, Kubernetes: k, Error: "tools: " + err.Error(), Seconds: map[string]float64{}}
			} else {
				c = runCell(ctx, o, bin, k, p)
			}
			c.Skew = Skew(p.CCMRelease, k)
			c.Seconds["tools"] = toolsSecs
			toolsSecs = 0
			c.Verdict = CellVerdict(c.Tests, c.Error)
			fmt.Fprintf(o.Out, "lkg: %s on %s: %s %s\n", p.Name, k, c.Verdict, strings.Join(FailedTests(c), "; ")+firstLine(c.Error))
			r.Cells = append(r.Cells, c)
		}
	}
	r.Took = time.Since(r.Started).Round(time.Second).String()
	return r
}

// Compare fills in the last known good releases and the changes since
// prev (nil: none).
func (r *Report) Compare(prev *Report) {
	var names []string
	for _, p := range r.Providers {
		names = append(names, p.Name)
	}
	r.LastKnownGood = LastKnownGood(r.Cells, names, prev)
	if prev != nil {
		r.Previous = prev.Started.UTC().Format("2006-01-02 15:04 UTC")
		r.Changes = Diff(prev, r)
	}
}

// ToolsFor builds (or finds built) release k's tools with
// hack/lkg-tools.sh and returns their bin directory.
func ToolsFor(ctx context.Context, root, k string, progress io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "lkg-tools.sh"), k)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/lkg-tools.sh %s: %v", k, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

func runCell(ctx context.Context, o Options, bin, k string, p Provider) (c Cell) {
	logger := klog.FromContext(ctx)
	c = Cell{Provider: p.Name, Kubernetes: k, Seconds: map[string]float64{}}
	dir := filepath.Join(o.OutDir, p.Name+"_"+k)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.Error = err.Error()
		return c
	}
	env := append([]string{tools.EnvBinDir + "=" + bin}, p.Env...)
	var extra []string
	if p.CCMBinary != "" {
		extra = append(extra, "--ccm-binary", p.CCMBinary)
	}
	// The e2e run's family is the environment's (the subset is dual-stack).
	if o.E2E != nil && o.E2E.IPFamily != "" {
		extra = append(extra, "--ip-family="+o.E2E.IPFamily)
	}
	if p.BrokenFile != "" {
		if err := os.WriteFile(p.BrokenFile, nil, 0o644); err != nil {
			c.Error = err.Error()
			return c
		}
	}
	began := time.Now()
	up, err := upstreame2e.StartUpEnv(ctx, o.Portside, o.Root, filepath.Join(dir, "up"), o.Nodes, env, extra...)
	c.Seconds["up"] = time.Since(began).Seconds()
	defer func() {
		if up == nil {
			return
		}
		if err := up.Stop(context.WithoutCancel(ctx)); err != nil {
			logger.Error(err, "Tearing down", "provider", p.Name, "kubernetes", k)
			c.Error = nonEmpty(c.Error, "down: "+err.Error())
			return
		}
		_ = up.WriteFile(filepath.Join(dir, "up.log"))
		if err := up.Purge(filepath.Join(dir, "logs")); err != nil {
			logger.Error(err, "Removing the environment's data directory")
		}
	}()
	if err != nil {
		c.Error = "up: " + lastLines(err.Error(), 3)
		return c
	}
	if p.BrokenFile != "" {
		if err := os.WriteFile(p.BrokenFile, []byte(p.Broken), 0o644); err != nil {
			c.Error = err.Error()
			return c
		}
	}
	data := filepath.Join(dir, "up")
	began = time.Now()
	c.Tests, err = runConformance(ctx, o, p, bin, data, dir)
	c.Seconds["conformance"] = time.Since(began).Seconds()
	if err != nil {
		c.Error = "conformance: " + err.Error()
		return c
	}
	if o.E2E == nil || p.NoE2E != "" {
		return c
	}
	began = time.Now()
	e2eTests, err := runE2E(ctx, o, bin, up.Kubeconfig(), dir)
	c.Seconds["e2e"] = time.Since(began).Seconds()
	c.Tests = append(c.Tests, e2eTests...)
	if err != nil {
		c.Error = "e2e: " + err.Error()
	}
	return c
}

// runConformance runs `portside conformance` against the environment at
// data and reads its JUnit report: a failed test is a result, no report
// an error.
func runConformance(ctx context.Context, o Options, p Provider, bin, data, dir string) ([]Test, error) {
	junit := filepath.Join(dir, "conformance.xml")
	args := []string{"conformance", "--kubeconfig", filepath.Join(data, "controlplane", "kubeconfig"),
		"--cloud-provider=local", "--cloud-config=" + filepath.Join(data, "ccm", "cloud.yaml"),
		"--cloud-data-dir", filepath.Join(data, "cloud"), "--junit", junit,
		// The local cloud converges within seconds: what does not in 20 s
		// is broken, and a broken provider fails fast.
		"--max-wait=20s"}
	if o.ConformanceFocus != "" {
		args = append(args, "--focus", o.ConformanceFocus)
	}
	if p.ConformanceSkip != "" {
		args = append(args, "--skip", p.ConformanceSkip)
	}
	cmd := exec.CommandContext(ctx, o.Portside, args...)
	cmd.Env = append(os.Environ(), tools.EnvBinDir+"="+bin)
	out, runErr := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(dir, "conformance.log"), out, 0o644)
	f, err := os.Open(junit)
	if err != nil {
		return nil, fmt.Errorf("no report (%v): %s", runErr, lastLines(string(out), 3))
	}
	defer func() { _ = f.Close() }()
	results, err := conformance.ReadJUnit(f)
	if err != nil {
		return nil, err
	}
	var tests []Test
	for _, r := range results {
		tests = append(tests, Test{Suite: "conformance", Name: r.Name, Status: r.Status, Message: firstLine(r.Message), Seconds: r.Duration.Seconds()})
	}
	return tests, nil
}

// runE2E runs o.E2E with the release's e2e.test and ginkgo.
func runE2E(ctx context.Context, o Options, bin, kubeconfig, dir string) ([]Test, error) {
	e2eDir := tools.E2EDir(bin)
	reportDir := filepath.Join(dir, "e2e")
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	results, _, err := upstreame2e.RunSuite(ctx, upstreame2e.SuiteOptions{
		Ginkgo: filepath.Join(e2eDir, tools.Ginkgo), E2ETest: filepath.Join(e2eDir, tools.E2ETest), Kubectl: filepath.Join(bin, tools.Kubectl),
		Kubeconfig: kubeconfig, Run: *o.E2E, ReportDir: reportDir, Nodes: 2, Timeout: time.Hour, Out: log,
	})
	var tests []Test
	for _, r := range results {
		tests = append(tests, Test{Suite: "e2e", Name: r.Spec, Status: strings.ToLower(r.Outcome), Message: firstLine(r.Reason), Seconds: r.Duration.Seconds()})
	}
	return tests, err
}

func nonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
