package devenv

import (
	"slices"
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

func TestChooseZones(t *testing.T) {
	abc := []string{"zone-a", "zone-b", "zone-c"}
	for _, tc := range []struct {
		name        string
		zones       []string
		want, nodes int
		got         []string
		err         string
	}{
		{"default: two zones", abc, 0, 3, []string{"zone-a", "zone-b"}, ""},
		{"default with one node: one zone", abc, 0, 1, []string{"zone-a"}, ""},
		{"default in a one-zone region", []string{"zone-a"}, 0, 3, []string{"zone-a"}, ""},
		{"all three", abc, 3, 6, abc, ""},
		{"one", abc, 1, 3, []string{"zone-a"}, ""},
		{"more than the region has", abc, 4, 8, nil, "--zones 4: the local cloud's region r has 3 zones"},
		{"more zones than nodes", abc, 3, 2, nil, "--zones 3 with --nodes 2 would leave a zone without nodes"},
		{"negative", abc, -1, 3, nil, "--zones -1: give 1 to 3"},
		{"no zones", nil, 0, 3, nil, "lists no zones"},
	} {
		got, err := chooseZones("r", tc.zones, tc.want, tc.nodes)
		if !slices.Equal(got, tc.got) || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: chooseZones(%v, %d, %d) = %v, %v; want %v, error with %q", tc.name, tc.zones, tc.want, tc.nodes, got, err, tc.got, tc.err)
		}
	}
}

func TestCheckInstall(t *testing.T) {
	for _, tc := range []struct {
		name, install, mode, ccm string
		err                      string
	}{
		{"default", "", NodeModeSimulated, "", ""},
		{"host", InstallHost, NodeModeReal, "/bin/ccm", ""},
		{"chart on real nodes", InstallChart, NodeModeReal, "", ""},
		{"chart on simulated nodes", InstallChart, NodeModeSimulated, "", "only real nodes can run"},
		{"chart with another CCM", InstallChart, NodeModeReal, "/bin/ccm", "give one of them"},
		{"manifests on real nodes", InstallManifests, NodeModeReal, "", ""},
		{"manifests on simulated nodes", InstallManifests, NodeModeSimulated, "", "--install=manifests is for the CCM as pods"},
		{"prepare on real nodes", InstallPrepare, NodeModeReal, "", ""},
		{"prepare on simulated nodes", InstallPrepare, NodeModeSimulated, "", "--install=prepare is for the CCM as pods"},
		{"prepare with another CCM", InstallPrepare, NodeModeReal, "/bin/ccm", "give one of them"},
		{"unknown", "kustomize", NodeModeReal, "", `--install "kustomize": want host`},
	} {
		err := checkInstall(tc.install, tc.mode, tc.ccm)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: checkInstall = %v, want an error with %q", tc.name, err, tc.err)
		}
	}
}

func TestCheckStatic(t *testing.T) {
	// /bin/sh is dynamically linked on every Debian; this test binary is
	// static only when built with CGO_ENABLED=0, so only sh is asserted.
	if err := checkStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("checkStatic(/bin/sh) = %v, want dynamically linked", err)
	}
	if err := checkStatic("/nonexistent"); err == nil {
		t.Errorf("checkStatic of a missing file: no error")
	}
}
