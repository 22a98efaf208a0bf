package upstreame2e

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// junitCase is a <testcase> of ginkgo's --junit-report.
type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	} `xml:"error"`
}

type junitReport struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

// Outcomes of a spec in the summary.
const (
	Passed  = "passed"
	Failed  = "failed"
	Skipped = "skipped"
)

// notRun is the reason of a focused spec the suite never ran.
const notRun = "not run: the suite ended before it (timeout, interrupt or abort)"

// Result is one spec's row in the summary.
type Result struct {
	Spec     string
	Outcome  string // Passed, Failed or Skipped
	Duration time.Duration
	// Reason is why it was skipped (the runs file's reason, or the
	// spec's own Skipf) or failed (the first line of the failure).
	Reason string
}

// leafPrefix is the node type ginkgo puts before a spec's text ("[It] ").
var leafPrefix = regexp.MustCompile(`^\[(It|SynchronizedBeforeSuite|BeforeSuite|AfterSuite|SynchronizedAfterSuite|ReportBeforeSuite|ReportAfterSuite|DeferCleanup \(Suite\))\] `)

// labelSuffix is the list of labels ginkgo appends to the name, e.g.
// " [sig-network, Feature:LoadBalancer, Slow]": Kubernetes' specs carry the
// same tags inline in their text, and every one has its sig label first.
var labelSuffix = regexp.MustCompile(` \[sig-[^\[\]]*\]$`)

// ReadJUnit parses ginkgo's JUnit report at path into the run's rows:
// every spec of r's focus (the rest of the suite, filtered out, is not
// reported), and every suite node that did not pass.
func ReadJUnit(path string, r Run) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var rep junitReport
	if err := xml.NewDecoder(f).Decode(&rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var cases []junitCase
	for _, s := range rep.Suites {
		cases = append(cases, s.Cases...)
	}
	return Summarize(cases, r), nil
}

// Summarize decides each case's row: the outcome from ginkgo's status, the
// reason from the runs file for a spec its skips leave out, else from the
// spec's own message.
func Summarize(cases []junitCase, r Run) []Result {
	var out []Result
	for _, c := range cases {
		isSpec := strings.HasPrefix(c.Name, "[It] ")
		spec := labelSuffix.ReplaceAllString(leafPrefix.ReplaceAllString(c.Name, ""), "")
		focused, reason := r.Selects(spec)
		if isSpec && !focused {
			continue
		}
		res := Result{Spec: spec, Duration: time.Duration(c.Time * float64(time.Second))}
		switch c.Status {
		case "passed":
			if !isSpec {
				continue
			}
			res.Outcome = Passed
		case "skipped", "pending":
			if !isSpec {
				continue
			}
			res.Outcome = Skipped
			if reason != "" {
				res.Reason = reason
			} else if c.Skipped != nil && strings.HasPrefix(c.Skipped.Message, "skipped - ") {
				res.Reason = firstLine(strings.TrimPrefix(c.Skipped.Message, "skipped - "))
			} else {
				// Ginkgo's bare "skipped" on a focused spec that no skip
				// names: the suite ended (timeout, interrupt, an abort)
				// before it ran.
				res.Reason = notRun
			}
		default: // failed, panicked, interrupted, aborted, timedout
			res.Outcome = Failed
			switch {
			case c.Failure != nil:
				res.Reason = firstLine(nonEmpty(c.Failure.Message, c.Failure.Body))
			case c.Error != nil:
				res.Reason = firstLine(nonEmpty(c.Error.Message, c.Error.Body))
			}
			res.Reason = strings.TrimSpace(c.Status + ": " + res.Reason)
		}
		out = append(out, res)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Spec < out[j].Spec })
	return out
}

func nonEmpty(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// Counts are a run's totals.
type Counts struct{ Passed, Failed, Skipped int }

// Count totals results.
func Count(results []Result) Counts {
	var c Counts
	for _, r := range results {
		switch r.Outcome {
		case Passed:
			c.Passed++
		case Failed:
			c.Failed++
		default:
			c.Skipped++
		}
	}
	return c
}

// WriteTable writes the summary: one row per spec, then the totals.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "RESULT\tTIME\tSPEC\tREASON")
	for _, r := range results {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Outcome, r.Duration.Round(time.Second), r.Spec, r.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c := Count(results)
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", c.Passed, c.Failed, c.Skipped)
	return err
}

// WriteMarkdown writes the summary as a Markdown table (for docs/conformance.md).
func WriteMarkdown(w io.Writer, results []Result) error {
	if _, err := fmt.Fprintln(w, "| Spec | Result | Time | Reason |\n|---|---|---|---|"); err != nil {
		return err
	}
	for _, r := range results {
		if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s |\n", strings.ReplaceAll(r.Spec, "|", `\|`), r.Outcome, r.Duration.Round(time.Second), strings.ReplaceAll(r.Reason, "|", `\|`)); err != nil {
			return err
		}
	}
	c := Count(results)
	_, err := fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", c.Passed, c.Failed, c.Skipped)
	return err
}
