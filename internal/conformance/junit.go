package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// JUnit XML, as CI systems read it.
type (
	junitSuite struct {
		XMLName  xml.Name    `xml:"testsuite"`
		Name     string      `xml:"name,attr"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Skipped  int         `xml:"skipped,attr"`
		Time     string      `xml:"time,attr"`
		Cases    []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		ClassName string        `xml:"classname,attr"`
		Time      string        `xml:"time,attr"`
		Failure   *junitMessage `xml:"failure,omitempty"`
		Skipped   *junitMessage `xml:"skipped,omitempty"`
		SystemOut string        `xml:"system-out,omitempty"`
	}
	junitMessage struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
)

// WriteJUnit writes the results as one JUnit testsuite named suiteName.
func WriteJUnit(w io.Writer, suiteName string, results []Result) error {
	_, failed, skipped, total := Summary(results)
	s := junitSuite{Name: suiteName, Tests: len(results), Failures: failed, Skipped: skipped, Time: seconds(total.Seconds())}
	for _, r := range results {
		c := junitCase{Name: r.Name, ClassName: suiteName, Time: seconds(r.Duration.Seconds()), SystemOut: strings.Join(r.Logs, "\n")}
		first, _, _ := strings.Cut(r.Message, "\n")
		switch r.Status {
		case StatusFailed:
			c.Failure = &junitMessage{Message: first, Text: r.Message}
		case StatusSkipped:
			c.Skipped = &junitMessage{Message: first, Text: r.Message}
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func seconds(s float64) string { return fmt.Sprintf("%.3f", s) }

// ReadJUnit parses what WriteJUnit wrote back into results (Logs from
// system-out, the message from the failure's or skip's text): the
// last-known-good matrix (test/lkg) reads each run's report this way.
func ReadJUnit(r io.Reader) ([]Result, error) {
	var s junitSuite
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("conformance JUnit report: %w", err)
	}
	out := make([]Result, 0, len(s.Cases))
	for _, c := range s.Cases {
		r := Result{Name: c.Name, Status: StatusPassed}
		var secs float64
		if _, err := fmt.Sscanf(c.Time, "%g", &secs); err == nil {
			r.Duration = time.Duration(secs * float64(time.Second))
		}
		switch {
		case c.Failure != nil:
			r.Status, r.Message = StatusFailed, c.Failure.Text
		case c.Skipped != nil:
			r.Status, r.Message = StatusSkipped, c.Skipped.Text
		}
		if c.SystemOut != "" {
			r.Logs = strings.Split(c.SystemOut, "\n")
		}
		out = append(out, r)
	}
	return out, nil
}
