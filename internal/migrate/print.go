package migrate

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// MaxObjectsShown bounds the objects listed per finding in text; JSON has all.
const MaxObjectsShown = 10

// ShortList lists at most n items, then "and N more".
func ShortList(items []string, n int) []string {
	if len(items) <= n {
		return items
	}
	return append(append([]string{}, items[:n]...), fmt.Sprintf("and %d more", len(items)-n))
}

// Print writes the report as text ("" or "text") or JSON.
func Print(w io.Writer, r *Report, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "", "text":
	default:
		return fmt.Errorf("--output %q is not supported: use text or json", output)
	}
	state := "READY"
	if !r.Ready {
		state = "NOT READY"
	}
	fmt.Fprintf(w, "Cluster %s (Kubernetes %s): %s for an external cloud controller manager\n", r.Server, r.ServerVersion, state)
	fmt.Fprintf(w, "%d blocking, %d warning(s), %d finding(s) in all\n", r.Blocking, r.Warnings, len(r.Findings))
	area := ""
	for _, f := range r.Findings {
		if f.Area != area {
			area = f.Area
			fmt.Fprintf(w, "\n== %s ==\n", area)
		}
		fmt.Fprintf(w, "[%s] %s\n", strings.ToUpper(string(f.Severity)), f.Title)
		for _, o := range ShortList(f.Objects, MaxObjectsShown) {
			fmt.Fprintf(w, "    - %s\n", o)
		}
		if f.Detail != "" {
			fmt.Fprintf(w, "    why: %s\n", f.Detail)
		}
		if f.Fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", f.Fix)
		}
	}
	kcm, ccm, err := r.LeaderMigration.YAML()
	if err != nil {
		return err
	}
	printPlan(w, r.LeaderMigrationPlan)
	// The files name the steps that use them: kube-controller-manager N+1
	// takes neither (it must not run leader migration).
	fmt.Fprintf(w, "\n== LeaderMigrationConfiguration ==\n# kcm.yaml: kube-controller-manager of version N only (steps 3 and 6), as %s\n%s---\n"+
		"# ccm.yaml: cloud-controller-manager only (step 4), as %s; never kube-controller-manager N+1\n%s", LeaderMigrationFile, kcm, LeaderMigrationFile, ccm)
	return nil
}
