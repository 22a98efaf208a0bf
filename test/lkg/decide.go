package lkg

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// PickVersions chooses the default releases from what the Go module proxy
// serves of k8s.io/kubernetes: the newest patch of each of the n newest
// minor versions, oldest first. Pre-releases (alpha, beta, rc) are left
// out: the matrix is of what providers ship against.
func PickVersions(served []string, n int) ([]string, error) {
	newest := map[uint]*version.Version{}
	for _, s := range served {
		v, err := version.ParseSemantic(s)
		if err != nil || v.PreRelease() != "" || v.Major() != 1 {
			continue
		}
		if cur := newest[v.Minor()]; cur == nil || v.GreaterThan(cur) {
			newest[v.Minor()] = v
		}
	}
	if len(newest) < n {
		return nil, fmt.Errorf("the Go module proxy serves %d minor releases of k8s.io/kubernetes (%s), fewer than the %d asked for; name them with --versions", len(newest), strings.Join(served, " "), n)
	}
	minors := make([]uint, 0, len(newest))
	for m := range newest {
		minors = append(minors, m)
	}
	slices.Sort(minors)
	var out []string
	for _, m := range minors[len(minors)-n:] {
		out = append(out, "v"+newest[m].String())
	}
	return out, nil
}

// CellVerdict is a cell's verdict from its tests: an error when it could
// not run or ran no test (an empty run proves nothing), failed when any
// test failed, else passed. Skipped tests do not fail a cell: each says
// why (a capability the provider lacks).
func CellVerdict(tests []Test, runErr string) string {
	if runErr != "" || len(tests) == 0 {
		return Error
	}
	for _, t := range tests {
		if t.Status == Failed {
			return Failed
		}
	}
	return Passed
}

// FailedTests are the names of a cell's failed tests, "suite/name".
func FailedTests(c Cell) []string {
	var out []string
	for _, t := range c.Tests {
		if t.Status == Failed {
			out = append(out, t.Suite+": "+t.Name)
		}
	}
	return out
}

// LastKnownGood is, per provider, the newest release it passed on: among
// this report's cells, and the previous report's last known good when
// that release was not run this time (knowledge not retested is kept; a
// release retested and failing is no longer good). From says where it
// comes from.
func LastKnownGood(cur []Cell, providers []string, prev *Report) map[string]LKG {
	out := map[string]LKG{}
	for _, p := range providers {
		var best *version.Version
		from := "this report"
		ran := map[string]bool{}
		for _, c := range cur {
			if c.Provider != p {
				continue
			}
			ran[c.Kubernetes] = true
			if c.Verdict != Passed {
				continue
			}
			if v, err := version.ParseSemantic(c.Kubernetes); err == nil && (best == nil || v.GreaterThan(best)) {
				best = v
			}
		}
		if prev != nil {
			if old, ok := prev.LastKnownGood[p]; ok && old.Version != "" && !ran[old.Version] {
				if v, err := version.ParseSemantic(old.Version); err == nil && (best == nil || v.GreaterThan(best)) {
					best, from = v, old.From
					if from == "this report" {
						from = "report of " + prev.Started.UTC().Format("2006-01-02 15:04 UTC")
					}
				}
			}
		}
		if best == nil {
			out[p] = LKG{From: "none passed"}
			continue
		}
		out[p] = LKG{Version: "v" + best.String(), From: from}
	}
	return out
}

// Diff compares this report's cells and last known good with the
// previous report's: a cell that passed and now fails, or fails tests it
// passed, is a NewFailure (the signal); a cell failing before and passing
// now is Fixed; a cell with no previous one is NewCell; a provider whose
// last known good moved is LKGChanged. Sorted by provider, release, kind.
func Diff(prev *Report, cur *Report) []Change {
	if prev == nil {
		return nil
	}
	var out []Change
	for _, c := range cur.Cells {
		old, ok := prev.Cell(c.Provider, c.Kubernetes)
		if !ok {
			out = append(out, Change{Provider: c.Provider, Kubernetes: c.Kubernetes, Kind: NewCell,
				Text: fmt.Sprintf("%s on %s: %s (not in the previous report)", c.Provider, c.Kubernetes, c.Verdict)})
			continue
		}
		before := map[string]string{}
		for _, t := range old.Tests {
			before[t.Suite+": "+t.Name] = t.Status
		}
		var newly []string
		for _, name := range FailedTests(c) {
			if before[name] != Failed {
				newly = append(newly, name)
			}
		}
		switch {
		case c.Verdict != Passed && old.Verdict == Passed, len(newly) > 0:
			what := c.Verdict
			if c.Error != "" {
				what += ": " + c.Error
			}
			out = append(out, Change{Provider: c.Provider, Kubernetes: c.Kubernetes, Kind: NewFailure, Tests: newly,
				Text: fmt.Sprintf("%s on %s: %s, was %s", c.Provider, c.Kubernetes, what, old.Verdict)})
		case c.Verdict == Passed && old.Verdict != Passed:
			out = append(out, Change{Provider: c.Provider, Kubernetes: c.Kubernetes, Kind: Fixed,
				Text: fmt.Sprintf("%s on %s: passed, was %s", c.Provider, c.Kubernetes, old.Verdict)})
		}
	}
	for p, now := range cur.LastKnownGood {
		if was, ok := prev.LastKnownGood[p]; ok && was.Version != now.Version {
			out = append(out, Change{Provider: p, Kind: LKGChanged,
				Text: fmt.Sprintf("%s: last known good %s, was %s", p, orNone(now.Version), orNone(was.Version))})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Provider != b.Provider {
			return a.Provider < b.Provider
		}
		if a.Kubernetes != b.Kubernetes {
			return a.Kubernetes < b.Kubernetes
		}
		return a.Kind < b.Kind
	})
	return out
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// Skews of a cell: the CCM's libraries against the control plane.
const (
	SkewNone = ""
	// SkewCCMOlder: the CCM is one minor older than kube-apiserver, as
	// upstream's version skew policy allows (during an upgrade the control
	// plane goes first).
	SkewCCMOlder = "ccm-one-minor-older"
	// SkewCCMNewer: the CCM's libraries are newer than the control plane,
	// which the policy does not promise to work; the matrix runs it
	// because providers ship one CCM build to clusters of several
	// releases.
	SkewCCMNewer = "ccm-newer"
	// SkewUnsupported: older by more than one minor.
	SkewUnsupported = "ccm-older-unsupported"
)

// Skew is the CCM's release (ccm) against the control plane's (kube), by
// minor version; "" when either is unknown or they match.
func Skew(ccm, kube string) string {
	c, err1 := version.ParseSemantic(ccm)
	k, err2 := version.ParseSemantic(kube)
	if err1 != nil || err2 != nil || c.Minor() == k.Minor() {
		return SkewNone
	}
	switch {
	case c.Minor() > k.Minor():
		return SkewCCMNewer
	case k.Minor()-c.Minor() == 1:
		return SkewCCMOlder
	default:
		return SkewUnsupported
	}
}

// SkewReleases are the releases of the run a CCM of release ccm is run
// on when it is the older side: those exactly one minor newer (what
// upstream's skew policy allows a CCM to lag), e.g. a v1.36 CCM on v1.37
// control planes.
func SkewReleases(ccm string, releases []string) []string {
	var out []string
	for _, k := range releases {
		if Skew(ccm, k) == SkewCCMOlder {
			out = append(out, k)
		}
	}
	return out
}

// PreviousRelease is the release before the newest in a run's releases
// (oldest first): the "previous release" whose CCM runs against the
// newest control plane.
func PreviousRelease(releases []string) (string, error) {
	newest, err := version.ParseSemantic(releases[len(releases)-1])
	if err != nil {
		return "", err
	}
	for i := len(releases) - 2; i >= 0; i-- {
		if v, err := version.ParseSemantic(releases[i]); err == nil && v.Minor()+1 == newest.Minor() {
			return releases[i], nil
		}
	}
	return "", fmt.Errorf("the releases %s have none a minor before %s: name the CCM's release (upstream-ccm@v1.%d.<patch>) or add it to --versions",
		strings.Join(releases, ", "), releases[len(releases)-1], newest.Minor()-1)
}
