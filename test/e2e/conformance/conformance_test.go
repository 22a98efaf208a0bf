// Package conformance runs `portside conformance` against `portside up`
// (Portside's CCM, upstream's, and one broken on purpose): its own package
// so that it runs beside test/e2e's tests, not after them.
package conformance

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	suite "github.com/portside-io/portside/internal/conformance"
	"github.com/portside-io/portside/internal/testenv"
)

// TestConformance runs `portside conformance` in three environments built
// by `portside up`: with Portside's CCM every test passes or is skipped
// with a reason; with upstream's own cloud-controller-manager (its app
// package and the local provider through pkg/cloud/upstream) exactly the
// documented differences fail; with a provider broken on purpose
// (test/brokenccm) exactly the tests covering what it breaks fail.
func TestConformance(t *testing.T) {
	bin, root := testenv.BuildPortside(t)
	build := func(pkg string) string {
		t.Helper()
		out := filepath.Join(t.TempDir(), filepath.Base(pkg))
		if msg, err := exec.Command("go", "build", "-o", out, filepath.Join(root, pkg)).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		ccm    string // --ccm-binary; "" for Portside's
		break_ string
		extra  []string // more conformance flags
		// wantFailed are the tests expected to fail.
		wantFailed []string
		// notRun are the suite's tests this run's --skip leaves out: no
		// result at all.
		notRun []string
		// Every other test of the suite (conformance.Tests) must pass but
		// those skipped, each asserted with its reason: a test that starts
		// skipping (a capability lost, a flag dropped) is a change, not
		// a pass.
	}{
		{name: "portside"},
		{name: "upstream-ccm", ccm: "test/upstreamccm",
			// Upstream's CCM serves no persistent-volume-label webhook (docs/conformance.md).
			wantFailed: []string{"volumes/pv-labels"}},
		{name: "broken-provider", ccm: "test/brokenccm", break_: "zones,lb-backends,routes",
			// Through --ccm-binary it serves no webhook, and PV labels are
			// not what it breaks; what is broken fails within 10 s.
			extra:  []string{"--skip=volumes/pv-labels", "--max-wait=10s"},
			notRun: []string{"volumes/pv-labels"},
			wantFailed: []string{"nodes/provided-node-ip", "nodes/lifecycle", "routes/pod-cidrs",
				"load-balancers/ingress-and-traffic", "load-balancers/udp", "load-balancers/mixed-protocols",
				"load-balancers/source-ranges", "load-balancers/etp-local", "load-balancers/node-changes",
				// Upstream's scenarios: every one sends traffic or reads backends' health.
				"load-balancers/type-changes-tcp", "load-balancers/type-changes-udp", "load-balancers/session-affinity",
				"load-balancers/udp-pod-cycles", "load-balancers/rolling-update", "load-balancers/etp-local-endpoints",
				"load-balancers/same-port-protocols"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "up")
			args := []string{"--data-dir", data, "--purge"}
			if tc.ccm != "" {
				args = append(args, "--ccm-binary", build(tc.ccm))
			}
			brokenFile := filepath.Join(t.TempDir(), "broken")
			t.Setenv("PORTSIDE_BROKEN_FILE", brokenFile)
			up, out, done := testenv.StartUp(t, bin, root, args...)
			defer testenv.StopUp(t, bin, data, up, done)
			if tc.break_ != "" {
				if err := os.WriteFile(brokenFile, []byte(tc.break_), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m := regexp.MustCompile(`registry\s+serving \S+ with (\S+);`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no registry line in up's output:\n%s", out.String())
			}
			junit := filepath.Join(t.TempDir(), "junit.xml")
			cred := filepath.Join(data, "credential-provider")
			conf := exec.Command(bin, "conformance", "--kubeconfig", filepath.Join(data, "controlplane", "kubeconfig"),
				"--cloud-provider=local", "--cloud-config="+filepath.Join(data, "ccm", "cloud.yaml"), "--cloud-data-dir", filepath.Join(data, "cloud"),
				"--credential-provider-config", filepath.Join(cred, "config.yaml"), "--credential-provider-bin-dir", filepath.Join(cred, "bin"),
				"--credential-provider-image", strings.Split(m[1], "@")[0], "--junit", junit,
				// Everything converges within seconds on the local cloud:
				// what does not in 20 s is broken.
				"--max-wait=20s")
			conf.Args = append(conf.Args, tc.extra...)
			// If the test binary dies (a go test timeout), the suite is
			// interrupted too: it cleans up what it made and exits.
			conf.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
			report, err := conf.CombinedOutput()
			t.Logf("portside conformance:\n%s", report)
			results := readJUnit(t, junit)
			got := map[string][]string{}
			for name, r := range results {
				got[r.status] = append(got[r.status], name)
			}
			// The expected sets, from the suite itself: every test not left
			// out has exactly one expected status.
			want := map[string][]string{"failed": tc.wantFailed}
			for _, test := range suite.Tests() {
				switch name := test.Name; {
				case slices.Contains(tc.notRun, name), slices.Contains(tc.wantFailed, name):
				case wantSkipped[name] != "":
					want["skipped"] = append(want["skipped"], name)
				default:
					want["passed"] = append(want["passed"], name)
				}
			}
			for _, status := range []string{"passed", "failed", "skipped"} {
				g, w := slices.Sorted(slices.Values(got[status])), slices.Sorted(slices.Values(want[status]))
				if !slices.Equal(g, w) {
					t.Errorf("%s tests %v, want exactly %v", status, g, w)
				}
			}
			if n := len(results); n != len(suite.Tests())-len(tc.notRun) {
				t.Errorf("%d tests reported, want %d (the suite's %d but %v)", n, len(suite.Tests())-len(tc.notRun), len(suite.Tests()), tc.notRun)
			}
			for name, r := range results {
				if r.status == "skipped" && wantSkipped[name] != "" && !strings.Contains(r.message, wantSkipped[name]) {
					t.Errorf("%s skipped with %q, want the reason %q", name, r.message, wantSkipped[name])
				}
			}
			if (err == nil) != (len(tc.wantFailed) == 0) {
				t.Errorf("exit status %v with %d expected failures", err, len(tc.wantFailed))
			}
		})
	}
}

// wantSkipped are the tests skipped in every environment of
// TestConformance, with (part of) the reason: the local cloud declares no
// lb-ip-mode (docs/conformance.md), and only its real machines serve a
// Service without NodePorts (TestConformance's `up` has simulated nodes;
// docs/conformance.md shows the run with real ones), nor has a pod that
// can send traffic, nor is dual-stack (test/realnode's TestUpDualStack
// runs the dual-stack tests). The other tests' needs are all met by
// `portside up` and the flags TestConformance passes.
var wantSkipped = map[string]string{"load-balancers/ip-mode": "needs lb-ip-mode",
	"load-balancers/dual-stack":           "needs lb-dual-stack",
	"load-balancers/dual-stack-etp-local": "needs lb-dual-stack",
	"load-balancers/ip-family-policies":   "needs lb-dual-stack",
	"nodes/dual-stack-addresses":          "needs lb-dual-stack",
	"routes/dual-stack":                   "needs lb-dual-stack",
	"load-balancers/without-node-ports":   "needs lb-without-node-ports",
	"load-balancers/etp-local-from-pods":  "no schedulable node reports a container runtime"}

type junitResult struct{ status, message string }

// readJUnit returns each test case's status (passed, failed or skipped) and
// its failure or skip message.
func readJUnit(t *testing.T, path string) map[string]junitResult {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no JUnit report: %v", err)
	}
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
		Cases []junitCase `xml:"testcase"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("JUnit report: %v", err)
	}
	cases := doc.Cases
	for _, s := range doc.Suites {
		cases = append(cases, s.Cases...)
	}
	out := map[string]junitResult{}
	for _, c := range cases {
		if _, dup := out[c.Name]; dup {
			t.Errorf("JUnit report: %s reported twice", c.Name)
		}
		switch {
		case c.Failure != nil:
			out[c.Name] = junitResult{"failed", c.Failure.Message}
		case c.Skipped != nil:
			out[c.Name] = junitResult{"skipped", c.Skipped.Message}
		default:
			out[c.Name] = junitResult{"passed", ""}
		}
	}
	return out
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

type junitCase struct {
	Name    string        `xml:"name,attr"`
	Failure *junitMessage `xml:"failure"`
	Skipped *junitMessage `xml:"skipped"`
}
