// Package upstreame2e runs Kubernetes' own end-to-end suite (e2e.test and
// ginkgo at KUBE_VERSION, built by hack/build-e2e.sh) against a Portside
// cluster: the runs are kept in runs.yaml (focus, skips with their
// reasons, the images they need), the runner (cmd/e2e-upstream) brings up
// `portside up --node-mode=real` or uses a given kubeconfig, and the
// summary reads ginkgo's JUnit report.
package upstreame2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Skip leaves the specs whose full text Pattern matches out of a run.
type Skip struct {
	Pattern string `json:"pattern"`
	// Reason is why: printed beside every spec it leaves out.
	Reason string `json:"reason"`
}

// Run is one selection of the suite.
type Run struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Provider is e2e.test's --provider. "local" is upstream's null
	// provider: no cloud API is called, and the LoadBalancer specs are not
	// provider-gated in v1.37.2 (aws, which cloud-provider-kind passes, is
	// a null provider too).
	Provider string   `json:"provider"`
	Focus    []string `json:"focus"`
	Skip     []Skip   `json:"skip"`
	// Nodes and Zones are the environment the runner brings up for this
	// run (`up --nodes --zones`; 0: the runner's defaults, 3 nodes in 2
	// zones), where its specs need more: the Traffic Distribution specs
	// skip themselves without 3 zones of 2 schedulable nodes each.
	Nodes int `json:"nodes,omitempty"`
	Zones int `json:"zones,omitempty"`
	// IPFamily is up's --ip-family for this run (ipv4 when empty): dual
	// for the dual-stack specs, which skip themselves on a single-stack
	// cluster.
	IPFamily string `json:"ipFamily,omitempty"`
}

// Image is an image the runs' specs pull and where it comes from.
type Image struct {
	Image  string   `json:"image"`
	Source string   `json:"source"`
	Runs   []string `json:"runs"`
}

// File is runs.yaml.
type File struct {
	Runs   []Run   `json:"runs"`
	Images []Image `json:"images"`
}

// Load reads and checks a runs file: every run named once, with a focus,
// regexps that compile and a reason for every skip.
func Load(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, err
	}
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.check(); err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func (f File) check() error {
	seen := map[string]bool{}
	for _, r := range f.Runs {
		if r.Name == "" || seen[r.Name] {
			return fmt.Errorf("run %q: empty or repeated name", r.Name)
		}
		seen[r.Name] = true
		if len(r.Focus) == 0 {
			return fmt.Errorf("run %s: no focus (it would run all 3,000 specs)", r.Name)
		}
		if r.Provider == "" {
			return fmt.Errorf("run %s: no provider", r.Name)
		}
		if r.Nodes < 0 || r.Zones < 0 || (r.Nodes > 0 && r.Zones > r.Nodes) {
			return fmt.Errorf("run %s: nodes %d, zones %d: want zones 0 to nodes (a zone without nodes serves nothing), 0 for the defaults", r.Name, r.Nodes, r.Zones)
		}
		switch r.IPFamily {
		case "", "ipv4", "dual", "ipv6":
		default:
			return fmt.Errorf("run %s: ipFamily %q: want ipv4, dual or ipv6 (up's --ip-family)", r.Name, r.IPFamily)
		}
		for _, p := range r.Focus {
			if _, err := regexp.Compile(p); err != nil {
				return fmt.Errorf("run %s: focus %q: %w", r.Name, p, err)
			}
		}
		for _, s := range r.Skip {
			if _, err := regexp.Compile(s.Pattern); err != nil {
				return fmt.Errorf("run %s: skip %q: %w", r.Name, s.Pattern, err)
			}
			if strings.TrimSpace(s.Reason) == "" {
				return fmt.Errorf("run %s: skip %q has no reason", r.Name, s.Pattern)
			}
		}
	}
	for _, im := range f.Images {
		for _, n := range im.Runs {
			if !seen[n] {
				return fmt.Errorf("image %s: unknown run %q", im.Image, n)
			}
		}
	}
	return nil
}

// Find returns the run named name.
func (f File) Find(name string) (Run, error) {
	names := make([]string, 0, len(f.Runs))
	for _, r := range f.Runs {
		if r.Name == name {
			return r, nil
		}
		names = append(names, r.Name)
	}
	return Run{}, fmt.Errorf("no run %q (runs: %s)", name, strings.Join(names, ", "))
}

// GinkgoArgs are ginkgo's selection flags for r: one --focus per focus and
// one --skip per skip (ginkgo ORs repeated flags).
func (r Run) GinkgoArgs() []string {
	var args []string
	for _, p := range r.Focus {
		args = append(args, "--focus="+p)
	}
	for _, s := range r.Skip {
		args = append(args, "--skip="+s.Pattern)
	}
	return args
}

// Selects reports whether spec (its full text) is in the run's focus, and,
// if a skip leaves it out, that skip's reason. Patterns are checked by
// Load, so they compile here.
func (r Run) Selects(spec string) (focused bool, skipReason string) {
	for _, p := range r.Focus {
		if regexp.MustCompile(p).MatchString(spec) {
			focused = true
			break
		}
	}
	if !focused {
		return false, ""
	}
	for _, s := range r.Skip {
		if regexp.MustCompile(s.Pattern).MatchString(spec) {
			return true, s.Reason
		}
	}
	return true, ""
}
