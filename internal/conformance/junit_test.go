package conformance

import (
	"bytes"
	"encoding/xml"
	"reflect"
	"testing"
	"time"
)

func TestWriteJUnitRoundTrip(t *testing.T) {
	results := []Result{
		{Name: "nodes/initialized", Status: StatusPassed, Duration: 1500 * time.Millisecond, Logs: []string{"checked 3 nodes"}},
		{Name: "routes/pod-cidrs", Status: StatusFailed, Duration: time.Second, Message: "node a: no route <&>\nnode b: no route"},
		{Name: "volumes/pv-labels", Status: StatusSkipped, Message: "needs volumes"},
	}
	var b bytes.Buffer
	if err := WriteJUnit(&b, "portside-conformance", results); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJUnit(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, results) {
		t.Errorf("ReadJUnit gave %+v, want %+v", back, results)
	}
	var got junitSuite
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got.Name != "portside-conformance" || got.Tests != 3 || got.Failures != 1 || got.Skipped != 1 || got.Time != "2.500" {
		t.Errorf("suite = %+v", got)
	}
	if len(got.Cases) != 3 {
		t.Fatalf("%d test cases", len(got.Cases))
	}
	for i, c := range []struct {
		name, time, failure, skipped, out string
	}{
		{"nodes/initialized", "1.500", "", "", "checked 3 nodes"},
		{"routes/pod-cidrs", "1.000", "node a: no route <&>", "", ""},
		{"volumes/pv-labels", "0.000", "", "needs volumes", ""},
	} {
		g := got.Cases[i]
		if g.Name != c.name || g.Time != c.time || g.SystemOut != c.out {
			t.Errorf("case %d = %+v", i, g)
		}
		if (g.Failure == nil) != (c.failure == "") || (g.Failure != nil && (g.Failure.Message != c.failure || g.Failure.Text != results[i].Message)) {
			t.Errorf("case %d failure = %+v, want message %q", i, g.Failure, c.failure)
		}
		if (g.Skipped == nil) != (c.skipped == "") || (g.Skipped != nil && g.Skipped.Message != c.skipped) {
			t.Errorf("case %d skipped = %+v, want %q", i, g.Skipped, c.skipped)
		}
	}
}
