package console

import "testing"

func TestSameExceptTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{"only the time differs", `{"cloud":{"x":1},"generated":"t1"}`, `{"cloud":{"x":1},"generated":"t2"}`, true},
		{"content differs", `{"cloud":{"x":1},"generated":"t1"}`, `{"cloud":{"x":2},"generated":"t1"}`, false},
		{"nothing sent yet", "", `{"cloud":{},"generated":"t1"}`, false},
		{"a string holding the field name is content", `{"cloud":{"n":",\"generated\":"},"generated":"t1"}`, `{"cloud":{"n":"x"},"generated":"t1"}`, false},
	} {
		var a []byte
		if tc.a != "" {
			a = []byte(tc.a)
		}
		if got := sameExceptTime(a, []byte(tc.b)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
