package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBin writes an executable file name in dir.
func fakeBin(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// noSbin keeps the host's /usr/sbin (where runc may really be) out of a test.
func noSbin(t *testing.T, dirs ...string) {
	saved := sbinDirs
	sbinDirs = dirs
	t.Cleanup(func() { sbinDirs = saved })
}

// TestCNIBinDir: the CNI directory is returned only with every plugin in
// it; a missing one is named, with how to build it.
func TestCNIBinDir(t *testing.T) {
	dir := t.TempDir()
	for _, p := range CNIPlugins {
		if p != "portmap" {
			fakeBin(t, filepath.Join(dir, CNIDir), p)
		}
	}
	_, err := CNIBinDir(dir)
	if err == nil || !strings.Contains(err.Error(), "portmap") || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("without portmap: err %v, want one naming portmap and make tools", err)
	}
	fakeBin(t, filepath.Join(dir, CNIDir), "portmap")
	got, err := CNIBinDir(dir)
	if err != nil || got != filepath.Join(dir, CNIDir) {
		t.Fatalf("CNIBinDir = %q, %v; want %q", got, err, filepath.Join(dir, CNIDir))
	}
}

// TestSystemPath: runc and nft are found on PATH, then in the sbin
// directories Debian installs them in; else the error says to run
// hack/ensure-node-packages.sh and names the Debian package.
func TestSystemPath(t *testing.T) {
	onPath, sbin := t.TempDir(), t.TempDir()
	t.Setenv("PATH", onPath)
	noSbin(t, sbin)

	_, err := SystemPath(Nft)
	if err == nil || !strings.Contains(err.Error(), "hack/ensure-node-packages.sh") || !strings.Contains(err.Error(), "nftables") {
		t.Fatalf("nft missing: err %v, want one naming hack/ensure-node-packages.sh and the nftables package", err)
	}
	want := fakeBin(t, sbin, Nft)
	if got, err := SystemPath(Nft); err != nil || got != want {
		t.Fatalf("nft in sbin: %q, %v; want %q", got, err, want)
	}
	want = fakeBin(t, onPath, Nft)
	if got, err := SystemPath(Nft); err != nil || got != want {
		t.Fatalf("nft on PATH and in sbin: %q, %v; want PATH's %q", got, err, want)
	}
}

// TestFindNodeBinaries: with everything there, every path is filled in;
// with nothing, the one error names each missing part.
func TestFindNodeBinaries(t *testing.T) {
	dir, onPath := t.TempDir(), t.TempDir()
	t.Setenv("PATH", onPath)
	noSbin(t)

	_, err := FindNodeBinaries(dir)
	if err == nil {
		t.Fatal("FindNodeBinaries of an empty dir: no error")
	}
	for _, name := range []string{Kubelet, KubeProxy, Containerd, ContainerdShimRuncV2, Ctr, "CNI plugin", Runc, Nft} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}

	for _, b := range []string{Kubelet, KubeProxy, Containerd, ContainerdShimRuncV2, Ctr} {
		fakeBin(t, dir, b)
	}
	for _, p := range CNIPlugins {
		fakeBin(t, filepath.Join(dir, CNIDir), p)
	}
	runc, nft := fakeBin(t, onPath, Runc), fakeBin(t, onPath, Nft)
	got, err := FindNodeBinaries(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := NodeBinaries{
		Kubelet: filepath.Join(dir, Kubelet), KubeProxy: filepath.Join(dir, KubeProxy),
		Containerd: filepath.Join(dir, Containerd), ContainerdShimRuncV2: filepath.Join(dir, ContainerdShimRuncV2), Ctr: filepath.Join(dir, Ctr),
		CNIBinDir: filepath.Join(dir, CNIDir), Runc: runc, Nft: nft,
	}
	if got != want {
		t.Errorf("FindNodeBinaries =\n%+v\nwant\n%+v", got, want)
	}
}

// TestReadVersionsNode: the checkout pins a real node's parts and image
// tags, and the directory name stays that of the control plane's pins.
func TestReadVersionsNode(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, err := ReadVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{
		"CONTAINERD_VERSION": v.Containerd, "CNI_PLUGINS_VERSION": v.CNIPlugins, "CRI_TOOLS_VERSION": v.CRITools,
		"AGNHOST_VERSION": v.Agnhost, "PAUSE_VERSION": v.Pause,
	} {
		if got == "" {
			t.Errorf("%s is not set in hack/tools/versions.env", name)
		}
	}
	if d := v.Dir(); d != "kube-"+v.Kube+"_etcd-"+v.Etcd {
		t.Errorf("Dir() = %q", d)
	}
}
