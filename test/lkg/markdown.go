package lkg

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteMarkdown writes the report for people: the matrix of provider ×
// release (passed with its counts, failed with the failing tests, or the
// error), the last known good release per provider, the changes since
// the previous report first (the signal), and the time of each cell.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Last known good: %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Portside %s; %s; took %s.\n\n", r.Portside, orNone(r.Machine), r.Took)
	if r.Previous != "" {
		if len(r.Changes) == 0 {
			fmt.Fprintf(&b, "**No change** since the previous report (%s).\n\n", r.Previous)
		} else {
			fmt.Fprintf(&b, "## Changes since the previous report (%s)\n\n", r.Previous)
			for _, c := range r.Changes {
				mark := ""
				if c.Kind == NewFailure {
					mark = "**"
				}
				fmt.Fprintf(&b, "- %s%s%s: %s", mark, c.Kind, mark, c.Text)
				if len(c.Tests) > 0 {
					fmt.Fprintf(&b, " (newly failing: %s)", strings.Join(c.Tests, "; "))
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("| provider | CCM |")
	for _, k := range r.Kubernetes {
		fmt.Fprintf(&b, " %s |", k)
	}
	b.WriteString(" last known good |\n|---|---|")
	for range r.Kubernetes {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, p := range r.Providers {
		ccm := p.CCM
		if p.CCMVersion != "" {
			ccm += "; built with " + p.CCMVersion
		}
		if p.NoE2E != "" {
			ccm += "; conformance only: " + p.NoE2E
		}
		if p.ConformanceSkip != "" {
			ccm += "; skips " + strings.Trim(p.ConformanceSkip, "^$") + " (no persistent-volume-label webhook in a CCM given by binary)"
		}
		fmt.Fprintf(&b, "| %s | %s |", p.Name, ccm)
		for _, k := range r.Kubernetes {
			c, ok := r.Cell(p.Name, k)
			switch {
			case !ok && len(p.Releases) > 0 && !slices.Contains(p.Releases, k):
				b.WriteString(" — |")
			default:
				fmt.Fprintf(&b, " %s%s |", cellText(c, ok), skewText(c.Skew))
			}
		}
		l := r.LastKnownGood[p.Name]
		text := orNone(l.Version)
		if l.Version != "" && l.From != "this report" {
			text += " (" + l.From + ")"
		}
		fmt.Fprintf(&b, " %s |\n", text)
	}
	b.WriteString("\nSkew: each CCM is built with the Kubernetes libraries its row names. Upstream's version skew policy lets a CCM be one minor older than kube-apiserver (the control plane upgrades first), never newer; the newer cells are what a provider shipping one CCM build to clusters of older releases gets.\n")
	b.WriteString("\n| provider | release | tools | up | conformance | e2e |\n|---|---|---|---|---|---|\n")
	for _, c := range r.Cells {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", c.Provider, c.Kubernetes,
			secs(c.Seconds, "tools"), secs(c.Seconds, "up"), secs(c.Seconds, "conformance"), secs(c.Seconds, "e2e"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cellText(c Cell, ok bool) string {
	if !ok {
		return "not run"
	}
	counts := map[string]int{}
	for _, t := range c.Tests {
		counts[t.Status]++
	}
	switch c.Verdict {
	case Passed:
		return fmt.Sprintf("passed (%d passed, %d skipped)", counts[Passed], counts["skipped"])
	case Failed:
		return fmt.Sprintf("**failed** (%d of %d): %s", counts[Failed], len(c.Tests), strings.Join(FailedTests(c), "; "))
	default:
		return "**error**: " + strings.ReplaceAll(firstLine(c.Error), "|", `\|`)
	}
}

// skewText marks a cell whose CCM is of another release than its control
// plane.
func skewText(skew string) string {
	switch skew {
	case SkewCCMOlder:
		return " · skew: CCM one minor older (allowed)"
	case SkewCCMNewer:
		return " · skew: CCM newer"
	case SkewUnsupported:
		return " · skew: CCM older than allowed"
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 160 {
		line = line[:160] + "..."
	}
	return line
}

func secs(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f s", v)
}
