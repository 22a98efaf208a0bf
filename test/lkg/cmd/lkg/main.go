// Command lkg runs the last-known-good matrix (`make lkg`; test/lkg):
// every provider on every Kubernetes release, with real nodes, and writes
// report.json and report.md with the changes since the previous report.
// Exit status 1 when a cell newly fails (the signal), 2 when the run
// could not be made.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/test/lkg"
	"github.com/portside-io/portside/test/upstreame2e"
)

func main() {
	changed, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lkg:", err)
		os.Exit(2)
	}
	if changed {
		os.Exit(1)
	}
}

func run() (bool, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return false, err
	}
	var (
		versions  = flag.String("versions", "", "Kubernetes releases, comma separated (default: the newest patch of each of the --minors newest minor releases the Go module proxy serves)")
		minors    = flag.Int("minors", 3, "how many minor releases by default")
		providers = flag.String("providers", "local,upstream-ccm,upstream-ccm@previous,broken-ccm", "the rows: local (Portside's CCM), upstream-ccm (upstream's CCM with the local provider through the adapter, test/upstreamccm), upstream-ccm@<release> (the same built with that older release's Kubernetes libraries, run on the control planes one minor newer; @previous: the release before the newest), broken-ccm (test/brokenccm, broken from --broken-since on), or name=<ccm binary> (any CCM taking upstream's flags, serving provider \"local\")")
		since     = flag.String("broken-since", "", "the release from which broken-ccm breaks (default: the newest minor of the run)")
		focus     = flag.String("conformance-focus", "", "portside conformance --focus (default: every test)")
		e2eRun    = flag.String("e2e-run", "subset", "the run of test/upstreame2e/runs.yaml made with each release's e2e.test; \"none\" for none")
		nodes     = flag.Int("nodes", 2, "real nodes per environment")
		portside  = flag.String("portside", filepath.Join(root, "_output", "bin", "portside"), "the portside binary (make build)")
		outDir    = flag.String("out", "", "where the reports go (default _output/lkg/<time>)")
		previous  = flag.String("previous", filepath.Join(root, "_output", "lkg", "latest.json"), "the previous report to compare with (missing: none); the new one replaces it")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ks, err := pickVersions(root, *versions, *minors)
	if err != nil {
		return false, err
	}
	if *outDir == "" {
		*outDir = filepath.Join(root, "_output", "lkg", time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return false, err
	}
	if *since == "" {
		*since = ks[len(ks)-1]
	}
	rows, err := buildProviders(ctx, root, *outDir, *providers, *since, ks)
	if err != nil {
		return false, err
	}
	if len(rows) == 0 {
		return false, fmt.Errorf("--providers %s: no row left to run on %s", *providers, strings.Join(ks, ", "))
	}
	var e2e *upstreame2e.Run
	if *e2eRun != "none" {
		f, err := upstreame2e.Load(filepath.Join(root, "test", "upstreame2e", "runs.yaml"))
		if err != nil {
			return false, err
		}
		r, err := f.Find(*e2eRun)
		if err != nil {
			return false, err
		}
		e2e = &r
	}
	prev, err := lkg.ReadReport(*previous)
	if err != nil {
		return false, err
	}
	fmt.Printf("lkg: releases %s; providers %s; reports in %s\n", strings.Join(ks, ", "), *providers, *outDir)
	report := lkg.RunMatrix(ctx, lkg.Options{
		Root: root, Portside: *portside, Kubernetes: ks, Providers: rows, Nodes: *nodes,
		ConformanceFocus: *focus, E2E: e2e, OutDir: *outDir, Out: os.Stdout,
	})
	report.Portside = describe(root)
	report.Machine = fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	report.Compare(prev)
	if err := report.Write(filepath.Join(*outDir, "report.json")); err != nil {
		return false, err
	}
	md, err := os.Create(filepath.Join(*outDir, "report.md"))
	if err != nil {
		return false, err
	}
	if err := lkg.WriteMarkdown(md, report); err != nil {
		return false, err
	}
	_ = md.Close()
	// The new report is the next run's previous one, unless interrupted.
	if ctx.Err() == nil {
		// --out may be elsewhere: the previous report's directory is made
		// here (a fresh clone has no _output/lkg).
		if err := os.MkdirAll(filepath.Dir(*previous), 0o755); err != nil {
			return false, err
		}
		if err := report.Write(*previous); err != nil {
			return false, err
		}
	}
	data, _ := os.ReadFile(filepath.Join(*outDir, "report.md"))
	fmt.Printf("\n%s\nreports in %s\n", data, *outDir)
	for _, c := range report.Changes {
		if c.Kind == lkg.NewFailure {
			return true, nil
		}
	}
	return false, ctx.Err()
}

// pickVersions is --versions, checked, or the proxy's newest releases.
func pickVersions(root, flagValue string, minors int) ([]string, error) {
	if flagValue != "" {
		var out []string
		for _, v := range strings.Split(flagValue, ",") {
			v = strings.TrimSpace(v)
			if _, err := version.ParseSemantic(v); err != nil || !strings.HasPrefix(v, "v1.") {
				return nil, fmt.Errorf("--versions: %q is not a Kubernetes release (want v1.<minor>.<patch>, e.g. v1.36.3)", v)
			}
			out = append(out, v)
		}
		return out, nil
	}
	cmd := exec.Command("go", "list", "-m", "-versions", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("asking the Go module proxy for k8s.io/kubernetes's releases (go list -m -versions): %v; name them with --versions", err)
	}
	return lkg.PickVersions(strings.Fields(string(out))[1:], minors)
}

// buildProviders makes the rows, building the test CCMs they name.
func buildProviders(ctx context.Context, root, outDir, list, since string, releases []string) ([]lkg.Provider, error) {
	sv, err := version.ParseSemantic(since)
	if err != nil {
		return nil, fmt.Errorf("--broken-since %q: %v", since, err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	libs := lkg.ModuleVersion(goMod, "k8s.io/cloud-provider")
	var out []lkg.Provider
	for _, p := range strings.Split(list, ",") {
		name, bin, custom := strings.Cut(strings.TrimSpace(p), "=")
		base, at, older := strings.Cut(name, "@")
		switch {
		case custom:
			if _, err := os.Stat(bin); err != nil {
				return nil, fmt.Errorf("--providers %s: %v", p, err)
			}
			out = append(out, lkg.Provider{Name: name, CCM: bin, CCMBinary: bin})
		case older && base == "upstream-ccm":
			release := at
			if at == "previous" {
				if release, err = lkg.PreviousRelease(releases); err != nil {
					// The default row on a run of one release: nothing to
					// skew against, said and left out.
					fmt.Fprintf(os.Stderr, "lkg: row %s left out: %v\n", p, err)
					continue
				}
			}
			on := lkg.SkewReleases(release, releases)
			if len(on) == 0 {
				return nil, fmt.Errorf("--providers %s: no release of the run (%s) is one minor newer than %s, the skew upstream allows a CCM", p, strings.Join(releases, ", "), release)
			}
			bin, err := lkg.BuildCCMAt(ctx, root, "test/upstreamccm", release, os.Stderr)
			if err != nil {
				return nil, fmt.Errorf("--providers %s: %v", p, err)
			}
			out = append(out, lkg.Provider{Name: "upstream-ccm@" + release, CCMBinary: bin, Releases: on,
				CCM:        "upstream's CCM built with Kubernetes " + release + "'s libraries (test/upstreamccm)",
				CCMVersion: "k8s.io/cloud-provider v0." + strings.TrimPrefix(release, "v1."), CCMRelease: release})
		case name == "local":
			out = append(out, lkg.Provider{Name: name, CCM: "Portside's CCM (portside ccm)",
				CCMVersion: "Portside " + describe(root) + ", k8s.io/client-go " + lkg.ModuleVersion(goMod, "k8s.io/client-go"),
				CCMRelease: lkg.StagingRelease(lkg.ModuleVersion(goMod, "k8s.io/client-go"))})
		case name == "upstream-ccm", name == "broken-ccm":
			pkg := map[string]string{"upstream-ccm": "upstreamccm", "broken-ccm": "brokenccm"}[name]
			bin := filepath.Join(outDir, "bin", pkg)
			build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./test/"+pkg)
			build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				return nil, fmt.Errorf("building test/%s: %v", pkg, err)
			}
			row := lkg.Provider{Name: name, CCMBinary: bin, CCM: "upstream's CCM (k8s.io/cloud-provider app) with the local provider through the adapter",
				CCMVersion: "k8s.io/cloud-provider " + libs, CCMRelease: lkg.StagingRelease(libs)}
			if name == "broken-ccm" {
				// The suite's 20 s waits fail the break at once; e2e.test's
				// specs would each wait minutes for traffic that cannot come.
				row.NoE2E = "the break fails the conformance suite in seconds, where each e2e spec would wait minutes"
				broken := filepath.Join(outDir, "broken")
				minor := "v" + strconv.Itoa(int(sv.Major())) + "." + strconv.Itoa(int(sv.Minor()))
				row.CCM = "test/brokenccm: no load-balancer backends, no routes on Kubernetes " + minor + " and newer"
				row.Env = []string{"PORTSIDE_BROKEN_FILE=" + broken, "PORTSIDE_BROKEN_SINCE=" + minor}
				row.BrokenFile, row.Broken = broken, "lb-backends,routes"
			}
			out = append(out, row)
		default:
			return nil, errors.New("--providers: unknown row " + strconv.Quote(p) + " (local, upstream-ccm, upstream-ccm@<release>|@previous, broken-ccm, or name=<ccm binary>)")
		}
	}
	for i := range out {
		if out[i].CCMBinary != "" {
			// Only Portside's own CCM comes with the webhook (docs/conformance.md).
			out[i].ConformanceSkip = `^volumes/pv-labels$`
		}
	}
	return out, nil
}

func describe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
