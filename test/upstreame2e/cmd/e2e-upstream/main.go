// Command e2e-upstream runs Kubernetes' own e2e suite (e2e.test and ginkgo,
// `make e2e-tools`) against Portside: one run of test/upstreame2e/runs.yaml,
// against a given kubeconfig or a `portside up --node-mode=real` it brings
// up and tears down (also on failure and Ctrl-C). It writes ginkgo's JUnit
// report, the summary table (summary.txt, summary.md) and the images the
// specs' pods named into the report directory, and exits 1 when a spec
// failed. `make e2e-upstream RUN=<name>` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/test/upstreame2e"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-upstream:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	var (
		runName     = flag.String("run", "loadbalancer", "the run of the runs file")
		runsFile    = flag.String("runs", filepath.Join(root, "test", "upstreame2e", "runs.yaml"), "the runs file (focus, skips with reasons, images)")
		kubeconfig  = flag.String("kubeconfig", "", "run against this cluster; empty: bring up `portside up --node-mode=real` and tear it down after")
		portside    = flag.String("portside", filepath.Join(root, "_output", "bin", "portside"), "the portside binary (make build)")
		nodes       = flag.Int("nodes", 3, "real nodes of the environment brought up (default: the run's nodes in the runs file, else 3)")
		zones       = flag.Int("zones", 0, "up's --zones: zones the nodes are spread over (default: the run's zones in the runs file, else up's default)")
		ipFamily    = flag.String("ip-family", "", "up's --ip-family: ipv4, dual or ipv6 (default: the run's ipFamily in the runs file, else ipv4); any run can be made in dual mode")
		ccmBinary   = flag.String("ccm-binary", "", "up's --ccm-binary: run this CCM instead of portside's (e.g. test/upstreamccm, for the comparison)")
		ginkgoNodes = flag.Int("ginkgo-nodes", 2, "ginkgo --nodes: parallel suite processes (the machine has 2 cores)")
		timeout     = flag.Duration("timeout", 2*time.Hour, "ginkgo --timeout for the whole suite")
		reportDir   = flag.String("report-dir", "", "where the reports go (default _output/e2e-upstream/<run>-<time>)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.FromContext(ctx)

	f, err := upstreame2e.Load(*runsFile)
	if err != nil {
		return err
	}
	r, err := f.Find(*runName)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["nodes"] && r.Nodes > 0 {
		*nodes = r.Nodes
	}
	if !set["zones"] && r.Zones > 0 {
		*zones = r.Zones
	}
	if !set["ip-family"] {
		*ipFamily = r.IPFamily
	}
	bin, err := tools.BinDir()
	if err != nil {
		return err
	}
	e2eDir := tools.E2EDir(bin)
	ginkgo, err := tools.Path(e2eDir, tools.Ginkgo)
	if err != nil {
		return fmt.Errorf("%w (make e2e-tools)", err)
	}
	e2eTest, err := tools.Path(e2eDir, tools.E2ETest)
	if err != nil {
		return fmt.Errorf("%w (make e2e-tools)", err)
	}
	kubectl, err := tools.Path(bin, tools.Kubectl)
	if err != nil {
		return err
	}
	if *reportDir == "" {
		*reportDir = filepath.Join(root, "_output", "e2e-upstream", r.Name+"-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(*reportDir, 0o755); err != nil {
		return err
	}
	began := time.Now()

	kcfg := *kubeconfig
	var runErr error
	if kcfg == "" {
		// up builds the images of the specs from what it finds; this
		// one's binary only this suite needs.
		if err := upstreame2e.BuildImageBinaries(ctx, root, e2eDir); err != nil {
			return err
		}
		var extra []string
		if *zones > 0 {
			extra = append(extra, fmt.Sprintf("--zones=%d", *zones))
		}
		if *ipFamily != "" {
			extra = append(extra, "--ip-family="+*ipFamily)
		}
		if *ccmBinary != "" {
			extra = append(extra, "--ccm-binary", *ccmBinary)
		}
		up, err := upstreame2e.StartUp(ctx, *portside, root, filepath.Join(*reportDir, "up"), *nodes, extra...)
		defer func() {
			if up == nil {
				return
			}
			if err := up.Stop(context.WithoutCancel(ctx)); err != nil {
				logger.Error(err, "Tearing down")
				return
			}
			_ = up.WriteFile(filepath.Join(*reportDir, "up.log"))
			// The components' logs stay beside the reports; the rest of
			// the environment's state (hundreds of MB) goes.
			if err := up.Purge(filepath.Join(*reportDir, "logs")); err != nil {
				logger.Error(err, "Removing the environment's data directory")
			}
		}()
		if err != nil {
			return err
		}
		fmt.Printf("portside up ready after %v (%d real nodes, zones %s); KUBECONFIG=%s\n", time.Since(began).Round(time.Second), *nodes, zonesText(*zones), up.Kubeconfig())
		kcfg = up.Kubeconfig()
	}
	results, images, err := upstreame2e.RunSuite(ctx, upstreame2e.SuiteOptions{
		Ginkgo: ginkgo, E2ETest: e2eTest, Kubectl: kubectl, Kubeconfig: kcfg,
		Run: r, ReportDir: *reportDir, Nodes: *ginkgoNodes, Timeout: *timeout, Out: os.Stdout,
	})
	if err != nil {
		return err
	}
	took := time.Since(began).Round(time.Second)
	var sum strings.Builder
	fmt.Fprintf(&sum, "run %s (%s): %s\n\n", r.Name, took, r.Description)
	if err := upstreame2e.WriteTable(&sum, results); err != nil {
		return err
	}
	if un := f.UnlistedImages(r.Name, images); len(un) > 0 {
		fmt.Fprintf(&sum, "images the specs' pods named that runs.yaml does not list for this run: %s\n", strings.Join(un, ", "))
		runErr = errors.New("unlisted images (see the summary)")
	}
	fmt.Print("\n" + sum.String())
	if err := os.WriteFile(filepath.Join(*reportDir, "summary.txt"), []byte(sum.String()), 0o644); err != nil {
		return err
	}
	md, err := os.Create(filepath.Join(*reportDir, "summary.md"))
	if err != nil {
		return err
	}
	if err := upstreame2e.WriteMarkdown(md, results); err != nil {
		return err
	}
	_ = md.Close()
	fmt.Printf("reports in %s\n", *reportDir)
	if c := upstreame2e.Count(results); c.Failed > 0 {
		return fmt.Errorf("%d of %d specs failed", c.Failed, len(results))
	}
	return runErr
}

func zonesText(n int) string {
	if n == 0 {
		return "up's default"
	}
	return strconv.Itoa(n)
}
