package testskip

import "testing"

func TestUnderCI(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want bool
	}{
		{"", false},
		{"true", true},
		{"TRUE", true},
		{"1", true},
		{"false", false},
		{"0", false},
		{"yes", false}, // not a ParseBool value: not CI, rather than guess
	} {
		t.Setenv("CI", tc.env)
		if got := UnderCI(); got != tc.want {
			t.Errorf("CI=%q: UnderCI() = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// recorder is a testing.TB that records whether Unavailable skipped or
// failed, without ending the real test.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skip(args ...any)               { r.skipped = true }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = true }

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		env          string
		skip, failed bool
	}{
		{env: "", skip: true},
		{env: "true", failed: true},
	} {
		t.Setenv("CI", tc.env)
		r := &recorder{TB: t}
		Unavailable(r, "no %s", "chromium")
		if r.skipped != tc.skip || r.failed != tc.failed {
			t.Errorf("CI=%q: skipped=%v failed=%v, want skipped=%v failed=%v", tc.env, r.skipped, r.failed, tc.skip, tc.failed)
		}
	}
}
