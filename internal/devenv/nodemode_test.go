package devenv

import (
	"strings"
	"testing"
)

func TestChooseNodeMode(t *testing.T) {
	const noRoot = "real nodes need root (network and mount namespaces, cgroups): run as root, or use --node-mode=simulated"
	for _, tc := range []struct {
		name, mode  string
		nodes       int
		unavailable string
		want        string
		note, err   string // substrings; "" for none
	}{
		{"library default is simulated", "", 3, "", NodeModeSimulated, "", ""},
		{"simulated asked", NodeModeSimulated, 500, "", NodeModeSimulated, "", ""},
		{"simulated asked, no root needed", NodeModeSimulated, 3, noRoot, NodeModeSimulated, "", ""},
		{"auto where the machine allows", NodeModeAuto, 3, "", NodeModeReal, "", ""},
		{"auto without root says why", NodeModeAuto, 3, noRoot, NodeModeSimulated, "need root", ""},
		{"auto at scale falls back", NodeModeAuto, MaxRealNodes + 1, "", NodeModeSimulated, "more than 50 real machines", ""},
		{"auto at the real limit", NodeModeAuto, MaxRealNodes, "", NodeModeReal, "", ""},
		{"real without root refuses", NodeModeReal, 3, noRoot, "", "", "--node-mode=real: real nodes need root"},
		{"real over the limit refuses", NodeModeReal, MaxRealNodes + 1, "", "", "", "at most 50 real nodes"},
		{"unknown mode", "kind", 3, "", "", "", `--node-mode "kind": want auto, real or simulated`},
	} {
		got, note, err := chooseNodeMode(tc.mode, tc.nodes, tc.unavailable)
		if got != tc.want || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
			t.Errorf("%s: chooseNodeMode(%q, %d) = %q, %q; want %q, note with %q", tc.name, tc.mode, tc.nodes, got, note, tc.want, tc.note)
		}
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
		}
	}
}
