package reference

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portside-io/portside/internal/netproxy/server"
	"github.com/portside-io/portside/internal/tools"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func checkCurrent(t *testing.T, file string, write func(io.Writer) error) {
	t.Helper()
	var want bytes.Buffer
	if err := write(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "reference", file))
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("docs/reference/%s is stale: run `go run ./hack/gen-reference` (%v)", file, err)
	}
}

// TestMetricsReferenceIsCurrent: docs/reference/metrics.md is what the
// components' registries generate.
func TestMetricsReferenceIsCurrent(t *testing.T) {
	checkCurrent(t, "metrics.md", WriteMetricsReference)
}

// TestEventsReferenceIsCurrent: docs/reference/events.md is what the
// reason constants generate.
func TestEventsReferenceIsCurrent(t *testing.T) {
	root := repoRoot(t)
	checkCurrent(t, "events.md", func(w io.Writer) error { return WriteEventsReference(w, root) })
}

// TestNoReasonLiterals: every recorder call and condition in non-test code
// under internal/ and pkg/ uses a documented reason constant.
func TestNoReasonLiterals(t *testing.T) {
	reasons, err := Reasons(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) == 0 {
		t.Fatal("no reason constants found")
	}
}

// TestReasonCheckFindsProblems: the check reports literals in recorder
// calls and conditions, undeclared and unused constants, and reads types.
func TestReasonCheckFindsProblems(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "internal", "ctl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `package ctl

import corev1 "k8s.io/api/core/v1"

// Reasons.
//
//portside:events kind=Node source=ctl
const (
	// Good.
	ReasonGood = "Good"
	// Never used.
	ReasonUnused = "Unused"
	// Through a variable.
	//
	//portside:type Warning
	ReasonViaField = "ViaField"
)

// Conditions.
//
//portside:conditions kind=Node type=Thing source=ctl
const (
	// Fine.
	//
	//portside:status True
	ReasonFine = "Fine"
)

const notAReason = "X"

type InitError struct{ Reason string }

func f(r recorder, e *InitError) {
	r.Event(nil, corev1.EventTypeNormal, ReasonGood, "m")
	r.Eventf(nil, corev1.EventTypeWarning, "Literal", "m")
	r.AnnotatedEventf(nil, nil, corev1.EventTypeWarning, notAReason, "m")
	r.Eventf(nil, corev1.EventTypeWarning, e.Reason, "m")
	_ = corev1.NodeCondition{Reason: "Lit"}
	_ = corev1.NodeCondition{Reason: ReasonFine}
	_ = &InitError{Reason: "AlsoLit"}
	_ = &InitError{Reason: ReasonViaField}
}
`
	if err := os.WriteFile(filepath.Join(dir, "ctl.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fset, files, err := parseTree(root)
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := collectReasons(fset, files)
	if err != nil {
		t.Fatal(err)
	}
	problems := checkReasons(fset, files, reasons)
	joined := strings.Join(problems, "\n")
	for _, want := range []string{`reason "Literal" is a literal`, "notAReason is not a constant", `reason "Lit" is a literal`,
		`reason "AlsoLit" is a literal`, "ReasonUnused is declared but never used", "ReasonUnused is in no recorder call"} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems lack %q:\n%s", want, joined)
		}
	}
	if len(problems) != 6 {
		t.Errorf("want 6 problems, got %d:\n%s", len(problems), joined)
	}
	types := map[string]string{}
	for _, r := range reasons {
		types[r.Const] = r.Type + r.Status
	}
	if types["ReasonGood"] != "Normal" || types["ReasonViaField"] != "Warning" || types["ReasonFine"] != "True" {
		t.Errorf("types and statuses: %v", types)
	}
}

type descCollector struct{ d *prometheus.Desc }

func (c descCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }
func (c descCollector) Collect(chan<- prometheus.Metric)    {}

// TestGatherMetrics: labels come back in the collector's order, constant
// labels apart, the type from the data model; a collector that collects
// nothing is an error rather than a metric left out.
func TestGatherMetrics(t *testing.T) {
	ms, err := gatherMetrics(metricSource{pkg: "x", register: func(reg prometheus.Registerer) error {
		reg.MustRegister(
			prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "H.", ConstLabels: prometheus.Labels{"k": "v"}}, []string{"zeta", "alpha", "mid"}),
			prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "G."}),
			prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "s", Help: "S."}, []string{"b", "a"}),
		)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Metric{}
	for _, m := range ms {
		got[m.Name] = m
	}
	if h := got["h_seconds"]; h.Type != "histogram" || !slices.Equal(h.Labels, []string{"zeta", "alpha", "mid"}) ||
		!slices.Equal(h.ConstLabels, []string{`k="v"`}) || h.Help != "H." {
		t.Errorf("histogram: %+v", h)
	}
	if g := got["g"]; g.Type != "gauge" || len(g.Labels) != 0 {
		t.Errorf("gauge: %+v", g)
	}
	if s := got["s"]; s.Type != "summary" || !slices.Equal(s.Labels, []string{"b", "a"}) {
		t.Errorf("summary: %+v", s)
	}
	_, err = gatherMetrics(metricSource{pkg: "x", register: func(reg prometheus.Registerer) error {
		return reg.Register(descCollector{prometheus.NewDesc("silent", "S.", []string{"l"}, nil)})
	}})
	if err == nil {
		t.Error("a collector that collects nothing was accepted")
	}
}

// TestEventSourcesMatchManager: the source each reason group declares is
// the component name the manager gives the controller's recorder
// (internal/manager/builtin.go: pkg.New(pkg.Config{Recorder: cc.Recorder("...")})).
func TestEventSourcesMatchManager(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "internal", "manager", "builtin.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{} // package dir -> recorder component
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "New" {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		cfg, ok2 := call.Args[0].(*ast.CompositeLit)
		if !ok || !ok2 {
			return true
		}
		dir, ok := importedDir(f, pkg.Name)
		if !ok {
			return true
		}
		for _, el := range cfg.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != "Recorder" {
				continue
			}
			if rc, ok := kv.Value.(*ast.CallExpr); ok && len(rc.Args) == 1 {
				if lit, ok := rc.Args[0].(*ast.BasicLit); ok {
					sources[dir], _ = strconv.Unquote(lit.Value)
				}
			}
		}
		return true
	})
	if len(sources) == 0 {
		t.Fatal("no recorders found in internal/manager/builtin.go")
	}
	// Components outside the manager, with a recorder of their own.
	sources["internal/netproxy/server"] = server.EventSource
	reasons, err := Reasons(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reasons {
		if r.Condition != "" {
			continue
		}
		if src, ok := sources[r.Dir]; !ok || src != r.Source {
			t.Errorf("%s: reason %s declares source %q; the manager's recorder for %s is %q", r.Dir, r.Const, r.Source, r.Dir, src)
		}
	}
}
