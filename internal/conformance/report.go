package conformance

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is the counts of results and their total duration.
func Summary(results []Result) (passed, failed, skipped int, total time.Duration) {
	for _, r := range results {
		switch r.Status {
		case StatusPassed:
			passed++
		case StatusFailed:
			failed++
		default:
			skipped++
		}
		total += r.Duration
	}
	return passed, failed, skipped, total
}

// WriteTable writes the results as a table (NAME STATUS DURATION MESSAGE,
// the message's first line) and a summary line.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tDURATION\tMESSAGE")
	for _, r := range results {
		msg, _, more := strings.Cut(r.Message, "\n")
		if more {
			msg += " …"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", r.Name, r.Status, r.Duration.Round(time.Millisecond), msg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	p, f, s, d := Summary(results)
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped in %v\n", p, f, s, d.Round(time.Millisecond))
	return err
}
