package devenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUpstreamProxyArgs: upstream's binaries get every flag but the ones
// only Portside's define (which would stop them at start), matched by
// name and not by prefix; Portside's get all of them.
func TestUpstreamProxyArgs(t *testing.T) {
	args := []string{"--mode=grpc", "--allow-route-claims=portside:proxy-gateways", "--kubeconfig=/d/k", "--kubeconfig-burst=5",
		"--drain-timeout=1s", "--agent-id=a", "--v=2"}
	for _, tc := range []struct {
		name     string
		upstream bool
		want     []string
	}{
		{"portside's", false, args},
		{"upstream's", true, []string{"--mode=grpc", "--kubeconfig-burst=5", "--agent-id=a", "--v=2"}},
	} {
		if got := upstreamProxyArgs(slices.Clone(args), tc.upstream); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCheckNetworkProxyBinaries(t *testing.T) {
	full, half, notExec := t.TempDir(), t.TempDir(), t.TempDir()
	for dir, files := range map[string]map[string]os.FileMode{
		full:    {"proxy-server": 0o755, "proxy-agent": 0o755},
		half:    {"proxy-server": 0o755},
		notExec: {"proxy-server": 0o755, "proxy-agent": 0o644},
	} {
		for name, mode := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name, dir    string
		networkProxy bool
		install      string
		want         string
	}{
		{"not set", "", true, "", ""},
		{"not set, no proxy", "", false, InstallChart, ""},
		{"both binaries", full, true, InstallHost, ""},
		{"no proxy to replace", full, false, "", "--network-proxy=false runs none"},
		{"the chart's agents", full, true, InstallChart, "--install=chart runs the nodes' proxy agents from Portside's image"},
		{"manifests' agents", full, true, InstallManifests, "--install=manifests"},
		{"agent missing", half, true, "", "needs proxy-server and proxy-agent"},
		{"agent not executable", notExec, true, "", "proxy-agent is not an executable file"},
		{"no such directory", filepath.Join(full, "nope"), true, "", "no such file or directory"},
	} {
		err := checkNetworkProxyBinaries(tc.dir, tc.networkProxy, tc.install)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
