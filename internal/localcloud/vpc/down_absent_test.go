package vpc

import (
	"errors"
	"testing"
)

// TestAbsentOK: what ip says when the object is already gone is done
// (a machine's veth goes with its namespace: "No such device" then), any
// other failure is kept.
func TestAbsentOK(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		gone bool
	}{
		{"ip -n ps1-router link del ps1m3: exit status 2: RTNETLINK answers: No such device", true},
		{"Cannot find device \"ps1m3\"", true},
		{"Cannot remove namespace file: No such file or directory", true},
		{"RTNETLINK answers: No such process", true},
		{"RTNETLINK answers: Operation not permitted", false},
		{"RTNETLINK answers: Device or resource busy", false},
	} {
		if got := absentOK(errors.New(tc.msg)) == nil; got != tc.gone {
			t.Errorf("absentOK(%q) treats it as gone: %v, want %v", tc.msg, got, tc.gone)
		}
	}
	if absentOK(nil) != nil {
		t.Error("absentOK(nil) is an error")
	}
}
