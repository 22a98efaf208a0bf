package reference

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Event and condition reasons are named constants, declared in groups
// whose doc comment carries a directive (left out of the doc text):
//
//	//portside:events kind=<object kind> source=<event source component>
//	//portside:conditions kind=<object kind> type=<condition type> source=<controller>
//
// Each constant's doc comment is its meaning. A condition reason carries
// its status (//portside:status True|False). An event reason's type
// (Normal or Warning) is read from the recorder calls that use it; a
// reason that reaches the recorder only through a variable (an error's
// Reason field) carries //portside:type Normal|Warning instead.
const (
	directiveEvents     = "//portside:events"
	directiveConditions = "//portside:conditions"
	directiveStatus     = "//portside:status"
	directiveType       = "//portside:type"
	modulePath          = "github.com/portside-io/portside"
)

// scannedDirs are the directories, from the repository's root, whose
// non-test Go files are scanned.
var scannedDirs = []string{"internal", "pkg"}

// Reason is one event or condition reason constant.
type Reason struct {
	Dir     string // package directory, from the repository's root
	Const   string
	Value   string
	Meaning string
	Kind    string // object kind
	Source  string // event source or controller
	// Condition is the condition type; "" for an event reason.
	Condition string
	// Status of a condition reason; Type (Normal, Warning) of an event's.
	Status, Type string
	used         bool
	decl         *ast.Ident
}

// standIns are packages that stand in for other components in tests and
// `portside up`: the simulated kubelets write the kubelet's own Ready
// condition reasons, which are not Portside's and not checked here.
var standIns = map[string]bool{"internal/nodesim": true}

// recorderReasonArg maps the EventRecorder methods to the index of their
// reason argument (the event type is the one before).
var recorderReasonArg = map[string]int{"Event": 2, "Eventf": 2, "AnnotatedEventf": 3}

type goFile struct {
	dir  string // from root, slash-separated
	name string
	f    *ast.File
}

// parseTree parses the non-test Go files of scannedDirs under root.
func parseTree(root string) (*token.FileSet, []goFile, error) {
	fset := token.NewFileSet()
	var files []goFile
	for _, d := range scannedDirs {
		if _, err := os.Stat(filepath.Join(root, d)); os.IsNotExist(err) {
			continue
		}
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if n := e.Name(); n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			files = append(files, goFile{dir: filepath.ToSlash(rel), name: filepath.Base(p), f: f})
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return fset, files, nil
}

// directive returns the rest of the comment line that starts with name.
func directive(doc *ast.CommentGroup, name string) (string, bool) {
	if doc == nil {
		return "", false
	}
	for _, c := range doc.List {
		if rest, ok := strings.CutPrefix(c.Text, name); ok && (rest == "" || rest[0] == ' ') {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

func keyValues(s string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	return kv
}

// collectReasons reads the reason constant groups.
func collectReasons(fset *token.FileSet, files []goFile) ([]*Reason, error) {
	var out []*Reason
	for _, gf := range files {
		for _, decl := range gf.f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			ev, isEvents := directive(gd.Doc, directiveEvents)
			co, isConds := directive(gd.Doc, directiveConditions)
			if !isEvents && !isConds {
				continue
			}
			kv := keyValues(ev + co)
			if kv["kind"] == "" || kv["source"] == "" || (isConds && kv["type"] == "") {
				return nil, fmt.Errorf("%s: reason group without kind=, source= (and type= for conditions)", fset.Position(gd.Pos()))
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if len(vs.Names) != 1 || len(vs.Values) != 1 {
					return nil, fmt.Errorf("%s: one reason per constant", fset.Position(vs.Pos()))
				}
				lit, ok := vs.Values[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return nil, fmt.Errorf("%s: reason %s is not a string literal", fset.Position(vs.Pos()), vs.Names[0].Name)
				}
				value, _ := strconv.Unquote(lit.Value)
				meaning := ""
				if vs.Doc != nil {
					meaning = strings.Join(strings.Fields(vs.Doc.Text()), " ")
				}
				if meaning == "" {
					return nil, fmt.Errorf("%s: reason %s has no doc comment (its meaning)", fset.Position(vs.Pos()), vs.Names[0].Name)
				}
				r := &Reason{Dir: gf.dir, Const: vs.Names[0].Name, Value: value, Meaning: meaning, Kind: kv["kind"], Source: kv["source"], decl: vs.Names[0]}
				if isConds {
					r.Condition = kv["type"]
					r.Status, _ = directive(vs.Doc, directiveStatus)
					if r.Status != "True" && r.Status != "False" && r.Status != "Unknown" {
						return nil, fmt.Errorf("%s: condition reason %s needs %s True|False|Unknown", fset.Position(vs.Pos()), r.Const, directiveStatus)
					}
				} else {
					r.Type, _ = directive(vs.Doc, directiveType)
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// importedDir returns the directory, from the root, of the package that
// name refers to in f, if it is one of the module's.
func importedDir(f *ast.File, name string) (string, bool) {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		local := path.Base(p)
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local == name {
			rest, ok := strings.CutPrefix(p, modulePath+"/")
			return rest, ok
		}
	}
	return "", false
}

// eventType reads an event type argument: corev1.EventTypeNormal, or "Normal".
func eventType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return strings.TrimPrefix(x.Sel.Name, "EventType")
	case *ast.BasicLit:
		s, _ := strconv.Unquote(x.Value)
		return s
	}
	return ""
}

// checkReasons walks every recorder call and every condition literal:
// a reason written as a string literal, or a constant that is not in a
// reason group, is a problem; event types are recorded on the reasons.
func checkReasons(fset *token.FileSet, files []goFile, reasons []*Reason) []string {
	byName := map[string]*Reason{}
	for _, r := range reasons {
		byName[r.Dir+"."+r.Const] = r
	}
	var problems []string
	report := func(n ast.Node, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), fmt.Sprintf(format, args...)))
	}
	for _, gf := range files {
		ast.Inspect(gf.f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Ident:
				if r := byName[gf.dir+"."+x.Name]; r != nil && x != r.decl {
					r.used = true
				}
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok {
					if dir, ok := importedDir(gf.f, id.Name); ok {
						if r := byName[dir+"."+x.Sel.Name]; r != nil {
							r.used = true
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i, ok := recorderReasonArg[sel.Sel.Name]
				if !ok || len(x.Args) <= i {
					return true
				}
				var r *Reason
				switch a := x.Args[i].(type) {
				case *ast.BasicLit:
					report(a, "event reason %s is a literal: use a constant of the package's reason group (events.go)", a.Value)
					return true
				case *ast.Ident:
					if r = byName[gf.dir+"."+a.Name]; r == nil || r.Condition != "" {
						report(a, "event reason %s is not a constant of the package's event reason group (events.go)", a.Name)
						return true
					}
				case *ast.SelectorExpr:
					if id, ok := a.X.(*ast.Ident); ok {
						if dir, ok := importedDir(gf.f, id.Name); ok {
							if r = byName[dir+"."+a.Sel.Name]; r == nil || r.Condition != "" {
								report(a, "event reason %s.%s is not a constant of an event reason group", id.Name, a.Sel.Name)
								return true
							}
						}
					}
					// else a field (an error's Reason): the constants it
					// holds carry their type.
				}
				if r == nil {
					return true
				}
				t := eventType(x.Args[i-1])
				if t != "Normal" && t != "Warning" {
					report(x, "event type of %s: want corev1.EventTypeNormal or corev1.EventTypeWarning", r.Const)
					return true
				}
				if r.Type != "" && r.Type != t {
					report(x, "event reason %s is emitted as %s and as %s: one type per reason", r.Const, r.Type, t)
				}
				r.Type = t
			case *ast.CompositeLit:
				if standIns[gf.dir] || !reasonCarrier(x.Type) {
					return true
				}
				for _, el := range x.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Reason" {
							if lit, ok := kv.Value.(*ast.BasicLit); ok {
								report(lit, "reason %s is a literal: use a constant of the package's reason group (events.go)", lit.Value)
							}
						}
					}
				}
			}
			return true
		})
	}
	for _, r := range reasons {
		if !r.used {
			problems = append(problems, fmt.Sprintf("%s: reason %s is declared but never used", r.Dir, r.Const))
		}
		if r.Condition == "" && r.Type == "" {
			problems = append(problems, fmt.Sprintf("%s: event reason %s is in no recorder call: add %s Normal|Warning if it reaches one through a variable", r.Dir, r.Const, directiveType))
		}
	}
	return problems
}

// reasonCarrier says whether a composite literal's type carries a reason
// that Portside writes to the API: conditions, and the cloud node
// controller's InitError, whose Reason becomes an event's.
func reasonCarrier(t ast.Expr) bool {
	name := ""
	switch x := t.(type) {
	case *ast.Ident:
		name = x.Name
	case *ast.SelectorExpr:
		name = x.Sel.Name
	}
	return strings.HasSuffix(name, "Condition") || name == "InitError"
}

// Reasons returns every event and condition reason constant under root,
// checked: an error lists each recorder call or condition with a literal
// reason, each reason that is not a documented constant, and each
// constant never used.
func Reasons(root string) ([]*Reason, error) {
	fset, files, err := parseTree(root)
	if err != nil {
		return nil, err
	}
	reasons, err := collectReasons(fset, files)
	if err != nil {
		return nil, err
	}
	if problems := checkReasons(fset, files, reasons); len(problems) > 0 {
		return nil, fmt.Errorf("event and condition reasons:\n%s", strings.Join(problems, "\n"))
	}
	return reasons, nil
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// WriteEventsReference writes docs/reference/events.md from the reason
// constants of the repository at root.
func WriteEventsReference(w io.Writer, root string) error {
	reasons, err := Reasons(root)
	if err != nil {
		return err
	}
	// Controllers in the order the CCM starts them, then by directory.
	order := []string{"internal/controllers/node", "internal/controllers/nodelifecycle", "internal/controllers/service",
		"internal/controllers/nodeipam", "internal/controllers/route", "internal/controllers/servingcsr"}
	rank := func(dir string) int {
		if i := slices.Index(order, dir); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(reasons, func(a, b *Reason) int {
		if d := rank(a.Dir) - rank(b.Dir); d != 0 {
			return d
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	var b strings.Builder
	b.WriteString("# Events and conditions reference\n\n")
	b.WriteString("Generated by `go run ./hack/gen-reference` from the reason constants of the controllers\n" +
		"(`events.go` in each package, read by `internal/reference`); `make test` fails when it is stale, and when\n" +
		"a recorder call or a condition uses a reason that is not such a constant.\n\n")
	b.WriteString("Every event and condition below is written by `portside ccm`, by the controller named (the event\n" +
		"source is the `source.component` of the event). The admission webhooks, the network proxy and the\n" +
		"other commands emit no Kubernetes events. (The simulated kubelets of `portside up`, `internal/nodesim`,\n" +
		"write the kubelet's own Node condition `Ready`, reasons `KubeletReady` and `KubeletNotReady`.)\n\n")
	b.WriteString("## Events\n\n| reason | type | object | source (controller) | meaning | package |\n|---|---|---|---|---|---|\n")
	for _, r := range reasons {
		if r.Condition == "" {
			fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s | `%s` |\n", r.Value, r.Type, r.Kind, r.Source, cell(r.Meaning), r.Dir)
		}
	}
	b.WriteString("\n## Conditions\n\n| object | condition | status | reason | set by | meaning | package |\n|---|---|---|---|---|---|---|\n")
	for _, r := range reasons {
		if r.Condition != "" {
			fmt.Fprintf(&b, "| %s | `%s` | %s | `%s` | `%s` | %s | `%s` |\n", r.Kind, r.Condition, r.Status, r.Value, r.Source, cell(r.Meaning), r.Dir)
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}
