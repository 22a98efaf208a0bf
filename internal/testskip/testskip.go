// Package testskip is the one way a test here gives up for want of a tool
// or capability of the machine (a browser, root, a kernel feature). On a
// developer's machine it skips, saying what to install; under CI (CI=true)
// it fails, so a CI run cannot go green because what it was meant to prove
// was never run.
package testskip

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// UnderCI reports whether the CI environment variable says this is a CI
// run ("true", "1", ...: anything strconv.ParseBool takes as true).
func UnderCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// Unavailable ends the test because something it needs is missing: a skip
// outside CI, a failure under CI. The message should name what is missing
// and how to get it.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if UnderCI() {
		t.Fatalf("%s (CI=true: a missing tool or capability fails the run instead of skipping)", msg)
		return // Fatalf does not return on a real T; this is for fakes
	}
	t.Skip(msg)
}
