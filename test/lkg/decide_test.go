package lkg

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPickVersions(t *testing.T) {
	// What the Go module proxy served on 2026-12-01 (go-partial.tsv).
	served := []string{"v1.34.0", "v1.34.2", "v1.34.3", "v1.34.4", "v1.35.4", "v1.36.1", "v1.36.3", "v1.37.2"}
	for _, tc := range []struct {
		name    string
		served  []string
		n       int
		want    []string
		wantErr string
	}{
		{name: "three newest minors, newest patch each", served: served, n: 3, want: []string{"v1.35.4", "v1.36.3", "v1.37.2"}},
		{name: "one", served: served, n: 1, want: []string{"v1.37.2"}},
		{name: "unordered input", served: []string{"v1.37.2", "v1.36.3", "v1.36.10", "v1.35.0"}, n: 2, want: []string{"v1.36.10", "v1.37.2"}},
		{name: "pre-releases left out", served: []string{"v1.38.0-alpha.1", "v1.38.0-rc.0", "v1.37.2", "v1.36.3", "v1.35.4"}, n: 3, want: []string{"v1.35.4", "v1.36.3", "v1.37.2"}},
		{name: "non-v1 and junk left out", served: []string{"v0.1.0", "garbage", "v2.0.0", "v1.37.2", "v1.36.3"}, n: 2, want: []string{"v1.36.3", "v1.37.2"}},
		{name: "too few minors", served: []string{"v1.37.2", "v1.37.1"}, n: 3, wantErr: "fewer than the 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PickVersions(tc.served, tc.n)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestCellVerdict(t *testing.T) {
	pass := Test{Suite: "conformance", Name: "a", Status: Passed}
	skip := Test{Suite: "conformance", Name: "b", Status: "skipped"}
	fail := Test{Suite: "e2e", Name: "c", Status: Failed}
	for _, tc := range []struct {
		name  string
		tests []Test
		err   string
		want  string
	}{
		{"all passed", []Test{pass, pass}, "", Passed},
		{"skips do not fail", []Test{pass, skip}, "", Passed},
		{"one failed", []Test{pass, fail, skip}, "", Failed},
		{"no tests proves nothing", nil, "", Error},
		{"only skipped is still a run", []Test{skip}, "", Passed},
		{"run error wins over passes", []Test{pass}, "e2e: no report", Error},
	} {
		if got := CellVerdict(tc.tests, tc.err); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func cell(p, k, verdict string, failed ...string) Cell {
	c := Cell{Provider: p, Kubernetes: k, Verdict: verdict, Tests: []Test{{Suite: "conformance", Name: "nodes/initialized", Status: Passed}}}
	for _, f := range failed {
		c.Tests = append(c.Tests, Test{Suite: "conformance", Name: f, Status: Failed})
	}
	return c
}

func TestLastKnownGood(t *testing.T) {
	prev := &Report{Started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), LastKnownGood: map[string]LKG{
		"local": {Version: "v1.37.2", From: "this report"}, "broken-ccm": {Version: "v1.36.3", From: "this report"},
		"old": {Version: "v1.35.4", From: "report of 2026-11-01 00:00 UTC"},
	}}
	for _, tc := range []struct {
		name      string
		cells     []Cell
		providers []string
		prev      *Report
		want      map[string]LKG
	}{
		{name: "newest passing release", providers: []string{"local"},
			cells: []Cell{cell("local", "v1.35.4", Passed), cell("local", "v1.37.2", Passed), cell("local", "v1.36.3", Passed)},
			want:  map[string]LKG{"local": {Version: "v1.37.2", From: "this report"}}},
		{name: "versions compare as versions, not strings", providers: []string{"local"},
			cells: []Cell{cell("local", "v1.9.0", Passed), cell("local", "v1.10.0", Passed)},
			want:  map[string]LKG{"local": {Version: "v1.10.0", From: "this report"}}},
		{name: "broken on the newest: the one before", providers: []string{"broken-ccm"},
			cells: []Cell{cell("broken-ccm", "v1.35.4", Passed), cell("broken-ccm", "v1.36.3", Passed), cell("broken-ccm", "v1.37.2", Failed, "x")},
			want:  map[string]LKG{"broken-ccm": {Version: "v1.36.3", From: "this report"}}},
		{name: "none passed, nothing before", providers: []string{"broken-ccm"},
			cells: []Cell{cell("broken-ccm", "v1.37.2", Failed, "x")},
			want:  map[string]LKG{"broken-ccm": {From: "none passed"}}},
		{name: "only the newest run and failing: the previous LKG, not retested, is kept", providers: []string{"broken-ccm"}, prev: prev,
			cells: []Cell{cell("broken-ccm", "v1.37.2", Failed, "x")},
			want:  map[string]LKG{"broken-ccm": {Version: "v1.36.3", From: "report of 2026-11-30 10:00 UTC"}}},
		{name: "the previous LKG retested and failing is no longer good", providers: []string{"local"}, prev: prev,
			cells: []Cell{cell("local", "v1.36.3", Passed), cell("local", "v1.37.2", Failed, "x")},
			want:  map[string]LKG{"local": {Version: "v1.36.3", From: "this report"}}},
		{name: "a newer pass beats the previous LKG", providers: []string{"broken-ccm"}, prev: prev,
			cells: []Cell{cell("broken-ccm", "v1.37.2", Passed)},
			want:  map[string]LKG{"broken-ccm": {Version: "v1.37.2", From: "this report"}}},
		{name: "an older pass does not beat the previous LKG not retested; its origin is kept", providers: []string{"old"}, prev: prev,
			cells: []Cell{cell("old", "v1.34.4", Passed)},
			want:  map[string]LKG{"old": {Version: "v1.35.4", From: "report of 2026-11-01 00:00 UTC"}}},
		{name: "an error is not a pass", providers: []string{"local"},
			cells: []Cell{cell("local", "v1.36.3", Passed), {Provider: "local", Kubernetes: "v1.37.2", Verdict: Error}},
			want:  map[string]LKG{"local": {Version: "v1.36.3", From: "this report"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LastKnownGood(tc.cells, tc.providers, tc.prev)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for p, w := range tc.want {
				if got[p] != w {
					t.Errorf("%s: got %+v, want %+v", p, got[p], w)
				}
			}
		})
	}
}

func TestDiff(t *testing.T) {
	prev := &Report{
		Cells: []Cell{cell("local", "v1.37.2", Passed), cell("broken-ccm", "v1.37.2", Passed), cell("flaky", "v1.37.2", Failed, "a"),
			cell("worse", "v1.37.2", Failed, "a")},
		LastKnownGood: map[string]LKG{"local": {Version: "v1.37.2"}, "broken-ccm": {Version: "v1.37.2"}},
	}
	cur := &Report{
		Cells: []Cell{cell("local", "v1.37.2", Passed), cell("broken-ccm", "v1.37.2", Failed, "load-balancers/etp-local"),
			cell("flaky", "v1.37.2", Passed), cell("worse", "v1.37.2", Failed, "a", "b"), cell("local", "v1.38.0", Passed),
			{Provider: "local", Kubernetes: "v1.36.3", Verdict: Error, Error: "up: exited"}},
		LastKnownGood: map[string]LKG{"local": {Version: "v1.38.0"}, "broken-ccm": {Version: "v1.36.3"}},
	}
	got := Diff(prev, cur)
	var kinds []string
	for _, c := range got {
		kinds = append(kinds, c.Provider+" "+c.Kubernetes+" "+c.Kind+" "+strings.Join(c.Tests, ","))
	}
	want := []string{
		"broken-ccm  LKGChanged ",
		"broken-ccm v1.37.2 NewFailure conformance: load-balancers/etp-local",
		"flaky v1.37.2 Fixed ",
		"local  LKGChanged ",
		"local v1.36.3 NewCell ",
		"local v1.38.0 NewCell ",
		"worse v1.37.2 NewFailure conformance: b",
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
	if Diff(nil, cur) != nil {
		t.Error("a diff without a previous report")
	}
	// A report against itself: nothing changed.
	if d := Diff(cur, cur); len(d) != 0 {
		t.Errorf("self diff %v", d)
	}
}

func TestWriteMarkdown(t *testing.T) {
	r := &Report{Started: time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC), Took: "1m", Portside: "v0.1", Kubernetes: []string{"v1.36.3", "v1.37.2"},
		Providers: []Provider{{Name: "local", CCM: "portside ccm"}, {Name: "broken-ccm", CCM: "test/brokenccm"},
			{Name: "upstream-ccm@v1.36.3", CCM: "old", CCMVersion: "k8s.io/cloud-provider v0.36.3", Releases: []string{"v1.37.2"}, NoE2E: "why"}},
		Cells: []Cell{cell("local", "v1.36.3", Passed), cell("local", "v1.37.2", Passed), cell("broken-ccm", "v1.36.3", Passed),
			cell("broken-ccm", "v1.37.2", Failed, "routes/pod-cidrs"), cell("upstream-ccm@v1.36.3", "v1.37.2", Passed)},
		LastKnownGood: map[string]LKG{"local": {Version: "v1.37.2", From: "this report"}, "broken-ccm": {Version: "v1.36.3", From: "this report"}},
		Previous:      "2026-12-01 10:00 UTC", Changes: []Change{{Provider: "broken-ccm", Kubernetes: "v1.37.2", Kind: NewFailure, Tests: []string{"conformance: routes/pod-cidrs"}, Text: "broken-ccm on v1.37.2: failed, was passed"}},
	}
	r.Cells[4].Skew = SkewCCMOlder
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| local | portside ccm | passed (1 passed, 0 skipped) | passed (1 passed, 0 skipped) | v1.37.2 |",
		"| broken-ccm | test/brokenccm | passed (1 passed, 0 skipped) | **failed** (1 of 2): conformance: routes/pod-cidrs | v1.36.3 |",
		"- **NewFailure**: broken-ccm on v1.37.2: failed, was passed (newly failing: conformance: routes/pod-cidrs)",
		"| upstream-ccm@v1.36.3 | old; built with k8s.io/cloud-provider v0.36.3; conformance only: why | — | passed (1 passed, 0 skipped) · skew: CCM one minor older (allowed) | none |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

func TestSkew(t *testing.T) {
	for _, tc := range []struct{ ccm, kube, want string }{
		{"v1.37.2", "v1.37.2", SkewNone},
		{"v1.37.2", "v1.37.0", SkewNone},
		{"v1.36.3", "v1.37.2", SkewCCMOlder},
		{"v1.35.4", "v1.37.2", SkewUnsupported},
		{"v1.37.2", "v1.36.3", SkewCCMNewer},
		{"v1.37.2", "v1.35.4", SkewCCMNewer},
		{"", "v1.37.2", SkewNone},
		{"v1.37.2", "garbage", SkewNone},
	} {
		if got := Skew(tc.ccm, tc.kube); got != tc.want {
			t.Errorf("Skew(%q, %q) = %q, want %q", tc.ccm, tc.kube, got, tc.want)
		}
	}
}

func TestSkewReleases(t *testing.T) {
	run := []string{"v1.35.4", "v1.36.3", "v1.37.2"}
	for _, tc := range []struct {
		ccm  string
		want []string
	}{
		{"v1.36.3", []string{"v1.37.2"}},
		{"v1.35.4", []string{"v1.36.3"}},
		{"v1.37.2", nil},
		{"v1.34.3", []string{"v1.35.4"}},
		{"v1.33.9", nil},
	} {
		if got := SkewReleases(tc.ccm, run); !slices.Equal(got, tc.want) {
			t.Errorf("SkewReleases(%s) = %v, want %v", tc.ccm, got, tc.want)
		}
	}
}

func TestPreviousRelease(t *testing.T) {
	for _, tc := range []struct {
		releases []string
		want     string
		wantErr  string
	}{
		{[]string{"v1.35.4", "v1.36.3", "v1.37.2"}, "v1.36.3", ""},
		{[]string{"v1.36.3", "v1.37.2"}, "v1.36.3", ""},
		{[]string{"v1.37.2"}, "", "upstream-ccm@v1.36.<patch>"},
		{[]string{"v1.35.4", "v1.37.2"}, "", "none a minor before v1.37.2"},
	} {
		got, err := PreviousRelease(tc.releases)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: %q, %v; want error %q", tc.releases, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.releases, got, err, tc.want)
		}
	}
}

func TestCCMGoMod(t *testing.T) {
	goMod := []byte(`module github.com/portside-io/portside

go 1.26.0

require (
	github.com/spf13/cobra v1.10.1
	k8s.io/api v0.37.2
	k8s.io/cloud-provider v0.37.2
	k8s.io/klog/v2 v2.140.0
	k8s.io/utils v0.0.0-20260626114624-be93311217bd
	sigs.k8s.io/apiserver-network-proxy/konnectivity-client v0.36.0
)

require k8s.io/kms v0.37.2 // indirect
require k8s.io/old v0.36.1 // indirect
`)
	got, err := CCMGoMod("/src/portside", goMod, "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"replace github.com/portside-io/portside => /src/portside",
		"\tk8s.io/api => k8s.io/api v0.36.3\n",
		"\tk8s.io/cloud-provider => k8s.io/cloud-provider v0.36.3\n",
		"\tk8s.io/kms => k8s.io/kms v0.36.3\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	// Not Kubernetes-released libraries, nor ones at another minor.
	for _, not := range []string{"klog", "k8s.io/utils", "konnectivity", "k8s.io/old"} {
		if strings.Contains(got, not) {
			t.Errorf("%q replaced:\n%s", not, got)
		}
	}
	for _, tc := range []struct{ release, wantErr string }{
		{"v1.37.2", "not older"},
		{"v1.38.0", "not older"},
		{"1.36", "not a Kubernetes release"},
	} {
		if _, err := CCMGoMod("/r", goMod, tc.release); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want %q", tc.release, err, tc.wantErr)
		}
	}
	if _, err := CCMGoMod("/r", []byte("module x\n"), "v1.36.3"); err == nil || !strings.Contains(err.Error(), "no release of k8s.io/cloud-provider") {
		t.Errorf("no cloud-provider: %v", err)
	}
	if got := StagingRelease("v0.37.2"); got != "v1.37.2" {
		t.Errorf("StagingRelease = %q", got)
	}
}
