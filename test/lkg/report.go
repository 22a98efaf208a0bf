// Package lkg is the last-known-good matrix (`make lkg`): for each
// Kubernetes release in a list, build its parts from module sources
// (hack/lkg-tools.sh), bring up `portside up` with real nodes at that
// release, run the provider conformance suite and a subset of Kubernetes'
// own e2e suite against each provider's CCM, and report the matrix, the
// newest release each provider passed on, and what changed since the
// previous report. This file holds the report; decide.go its decisions;
// run.go the runs.
package lkg

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Verdicts of a cell.
const (
	Passed = "passed"
	Failed = "failed"
	// Error: the cell could not be run (tools, up): no test verdict.
	Error = "error"
)

// Report is one run of the matrix, as written to report.json.
type Report struct {
	Started time.Time `json:"started"`
	Took    string    `json:"took"`
	// Portside is the checkout's version (git describe) and Machine what
	// it ran on.
	Portside string `json:"portside"`
	Machine  string `json:"machine,omitempty"`
	// Kubernetes are the releases, oldest first; Providers the rows.
	Kubernetes []string   `json:"kubernetes"`
	Providers  []Provider `json:"providers"`
	Cells      []Cell     `json:"cells"`
	// LastKnownGood is per provider name (decide.go: LastKnownGood).
	LastKnownGood map[string]LKG `json:"lastKnownGood"`
	// Previous is the report this one was compared with ("" for none).
	Previous string   `json:"previous,omitempty"`
	Changes  []Change `json:"changes,omitempty"`
}

// Provider is a row: a CCM and its cloud config.
type Provider struct {
	Name string `json:"name"`
	// CCM says what runs: Portside's own CCM, or the binary given.
	CCM string `json:"ccm"`
	// CCMBinary is up's --ccm-binary ("" for Portside's own).
	CCMBinary string `json:"ccmBinary,omitempty"`
	// CCMVersion is what the CCM was built against (the k8s.io/cloud-provider
	// release, and Portside's version for Portside's code), so a cell's
	// skew is read off the report.
	CCMVersion string `json:"ccmVersion,omitempty"`
	// CCMRelease is the Kubernetes release of CCMVersion's libraries
	// (v1.37.2 for k8s.io/cloud-provider v0.37.2): the row's skew against
	// each control plane (decide.go: Skew).
	CCMRelease string `json:"ccmRelease,omitempty"`
	// Releases, when set, are the only releases the row runs on (a CCM of
	// an older release runs on the control planes newer by the one minor
	// upstream's skew policy allows: SkewReleases).
	Releases []string `json:"releases,omitempty"`
	// NoE2E, when set, says why the row runs the conformance suite only.
	NoE2E string `json:"noE2E,omitempty"`
	// ConformanceSkip is portside conformance's --skip for the row: a CCM
	// given by binary serves no persistent-volume-label webhook (up
	// registers Portside's with Portside's CCM only), so
	// volumes/pv-labels is not its test.
	ConformanceSkip string `json:"conformanceSkip,omitempty"`
	// Env is added to up's environment (the CCM inherits it).
	Env []string `json:"env,omitempty"`
	// BrokenFile, when set, is test/brokenccm's $PORTSIDE_BROKEN_FILE:
	// empty while up starts, then Broken (what to break) once up is
	// ready, so the environment comes up healthy and the provider breaks
	// under the tests (on the releases $PORTSIDE_BROKEN_SINCE names).
	BrokenFile string `json:"brokenFile,omitempty"`
	Broken     string `json:"broken,omitempty"`
}

// Cell is one provider on one release.
type Cell struct {
	Provider   string `json:"provider"`
	Kubernetes string `json:"kubernetes"`
	Verdict    string `json:"verdict"`
	// Error says why the cell has no verdict of its tests.
	Error string `json:"error,omitempty"`
	Tests []Test `json:"tests"`
	// Skew is the CCM's release against the control plane's (Skew).
	Skew string `json:"skew,omitempty"`
	// Seconds per phase: tools, up, conformance, e2e.
	Seconds map[string]float64 `json:"seconds"`
}

// Test is one result of a suite.
type Test struct {
	// Suite is "conformance" (portside conformance) or "e2e" (Kubernetes'
	// e2e.test at the cell's release).
	Suite   string  `json:"suite"`
	Name    string  `json:"name"`
	Status  string  `json:"status"` // passed, failed or skipped
	Message string  `json:"message,omitempty"`
	Seconds float64 `json:"seconds"`
}

// LKG is a provider's last known good release.
type LKG struct {
	// Version is the newest release it passed on; "" for none known.
	Version string `json:"version"`
	// From is "this report", or the previous report's start time when the
	// release was not run again this time.
	From string `json:"from"`
}

// Change is a difference from the previous report (decide.go: Diff).
type Change struct {
	Provider   string `json:"provider"`
	Kubernetes string `json:"kubernetes,omitempty"`
	// Kind: NewFailure (the signal), Fixed, NewCell, LKGChanged.
	Kind  string   `json:"kind"`
	Tests []string `json:"tests,omitempty"`
	Text  string   `json:"text"`
}

// Kinds of Change.
const (
	NewFailure = "NewFailure"
	Fixed      = "Fixed"
	NewCell    = "NewCell"
	LKGChanged = "LKGChanged"
)

// Write saves r as indented JSON.
func (r *Report) Write(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadReport reads a report.json; a missing file is no report (nil, nil).
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: not a last-known-good report: %w", path, err)
	}
	return &r, nil
}

// Cell returns the cell of provider on release k, if any.
func (r *Report) Cell(provider, k string) (Cell, bool) {
	for _, c := range r.Cells {
		if c.Provider == provider && c.Kubernetes == k {
			return c, true
		}
	}
	return Cell{}, false
}
