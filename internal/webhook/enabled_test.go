package webhook

import (
	"strings"
	"testing"
)

var knownForTest = []Webhook{
	{Name: "persistent-volume-label", Path: "/persistent-volume-label"},
	{Name: "node-labels", Path: "/node-labels"},
	{Name: "experimental", Path: "/experimental", DisabledByDefault: true},
}

func webhookNames(ws []Webhook) string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return strings.Join(out, ",")
}

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
		err   string
	}{
		{nil, "", ""},
		{[]string{}, "", ""},
		{[]string{"*"}, "persistent-volume-label,node-labels", ""},
		{[]string{"*", "experimental"}, "persistent-volume-label,node-labels,experimental", ""},
		{[]string{"*", "-node-labels"}, "persistent-volume-label", ""},
		{[]string{"-node-labels", "*"}, "persistent-volume-label", ""},
		{[]string{"node-labels"}, "node-labels", ""},
		{[]string{"experimental"}, "experimental", ""},
		{[]string{"node-labels", "-node-labels"}, "", ""},
		{[]string{" node-labels ", ""}, "node-labels", ""},
		{[]string{"*", "-nope"}, "", `unknown webhook "nope"`},
		{[]string{"nope"}, "", "known webhooks: experimental (disabled by default), node-labels, persistent-volume-label"},
	} {
		got, err := Enabled(tc.flags, knownForTest)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "--webhooks: ") {
				t.Errorf("%q: err %v, want one containing %q", tc.flags, err, tc.err)
			}
			continue
		}
		if err != nil || webhookNames(got) != tc.want {
			t.Errorf("%q: got %q %v, want %q", tc.flags, webhookNames(got), err, tc.want)
		}
	}
	if _, err := Enabled([]string{"x"}, nil); err == nil || !strings.Contains(err.Error(), "no webhooks are built in") {
		t.Errorf("no known webhooks: %v", err)
	}
}
