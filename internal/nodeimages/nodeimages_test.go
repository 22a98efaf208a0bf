package nodeimages

import (
	"archive/tar"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/portside-io/portside/internal/tools"
)

// fakeBinDir holds static amd64 "binaries" for every image.
func fakeBinDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []string{tools.Pause, tools.Agnhost, tools.CoreDNS} {
		if err := os.WriteFile(filepath.Join(dir, b), fakeELF(t, elf.ET_EXEC, elf.EM_X86_64, elf.PT_LOAD), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeTools is a tools layer of one file, for images built without the
// host's packages.
func fakeTools(arch string) ([]byte, string, error) {
	layer, err := tarFiles([]file{{path: "bin", mode: 0o755, dir: true}, {path: "bin/sh", mode: 0o755, data: "fake " + arch}})
	return layer, "fake tools", err
}

// buildFake builds the images from fakeBinDir's binaries and fakeTools.
func buildFake(t *testing.T, dir string) ([]Image, error) {
	t.Helper()
	return buildAll(dir, fakeTools)
}

// layerEntries lists an image's last layer, the binary's: path → header.
func layerEntries(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("layers: %d, %v; want some", len(layers), err)
	}
	last := layers[len(layers)-1]
	if mt, _ := last.MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	rc, err := last.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// TestBuild: each image has its upstream name, a linux/amd64 OCI config
// with upstream's entrypoint, command and user, and one layer holding the
// binary (executable by that user) and what upstream's tests look for.
func TestBuild(t *testing.T) {
	images, err := buildFake(t, fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name             string
		entrypoint, cmd  []string
		user             string
		files            []string
		link, linkTarget string
		layers           int
	}{
		{PauseImage, []string{"/pause"}, nil, "65535:65535", []string{"pause"}, "", "", 1},
		{AgnhostImage, []string{"/agnhost"}, []string{"pause"}, "",
			[]string{"agnhost", "agnhost-2", "coredns", "etc/", "etc/group", "etc/passwd", "localhost.crt", "localhost.key", "tmp/", "uploads/"}, "agnhost-2", "agnhost", 2},
		{CoreDNSImage, []string{"/coredns"}, nil, "65532:65532", []string{"coredns", "etc/", "etc/group", "etc/passwd", "tmp/"}, "", "", 1},
		{BusyBoxImage, nil, []string{"sh"}, "", []string{"etc/", "etc/group", "etc/passwd", "tmp/"}, "", "", 2},
		{GlibcDNSTestingImage, nil, []string{"bash"}, "", []string{"coredns", "etc/", "etc/group", "etc/passwd", "tmp/"}, "", "", 2},
	}
	if len(images) != len(want) {
		t.Fatalf("Build made %d images, want %d", len(images), len(want))
	}
	for i, w := range want {
		img := images[i]
		t.Run(w.name, func(t *testing.T) {
			if img.Name != w.name {
				t.Fatalf("name %q, want %q", img.Name, w.name)
			}
			if mt, _ := img.Image.MediaType(); mt != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %s", mt)
			}
			cf, err := img.Image.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != "amd64" {
				t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
			}
			if !reflect.DeepEqual(cf.Config.Entrypoint, w.entrypoint) || !reflect.DeepEqual(cf.Config.Cmd, w.cmd) || cf.Config.User != w.user {
				t.Errorf("entrypoint %q cmd %q user %q; want %q %q %q", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, w.entrypoint, w.cmd, w.user)
			}
			// agnhost: the tools layer under the binary's.
			if layers, err := img.Image.Layers(); err != nil || len(layers) != w.layers {
				t.Errorf("%d layers (%v), want %d", len(layers), err, w.layers)
			}
			entries := layerEntries(t, img.Image)
			var got []string
			for n := range entries {
				got = append(got, n)
			}
			if len(got) != len(w.files) {
				t.Errorf("layer holds %q, want %q", got, w.files)
			}
			for _, f := range w.files {
				if entries[f] == nil {
					t.Errorf("layer lacks %s (has %q)", f, got)
				}
			}
			if len(w.entrypoint) == 0 {
				return // the tools layer's sh: TestHostToolsLayer
			}
			bin := entries[strings.TrimPrefix(w.entrypoint[0], "/")]
			if bin == nil || bin.Typeflag != tar.TypeReg || bin.Mode&0o005 != 0o005 || bin.Uid != 0 {
				t.Errorf("binary entry %+v: want a root-owned regular file others may read and execute", bin)
			}
			if w.link != "" {
				if h := entries[w.link]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != w.linkTarget {
					t.Errorf("%s: %+v, want a symbolic link to %s", w.link, h, w.linkTarget)
				}
			}
		})
	}
}

// TestBuildReproducible: the same binaries give the same digests, so a
// rebuilt image is not a new one to the registry or containerd.
func TestBuildReproducible(t *testing.T) {
	dir := fakeBinDir(t)
	a, err := buildFake(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildFake(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		da, _ := a[i].Image.Digest()
		db, _ := b[i].Image.Digest()
		if da != db {
			t.Errorf("%s: digests %s and %s of two builds", a[i].Name, da, db)
		}
	}
}

// TestBuildRefuses: a missing or dynamically linked binary is refused,
// naming the image, the file and make tools.
func TestBuildRefuses(t *testing.T) {
	dir := fakeBinDir(t)
	if err := os.Remove(filepath.Join(dir, tools.Agnhost)); err != nil {
		t.Fatal(err)
	}
	_, err := buildFake(t, dir)
	if err == nil || !strings.Contains(err.Error(), AgnhostImage) || !strings.Contains(err.Error(), "make tools") {
		t.Errorf("agnhost missing: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, tools.Agnhost), fakeELF(t, elf.ET_EXEC, elf.EM_X86_64, elf.PT_INTERP), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = buildFake(t, dir)
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), filepath.Join(dir, tools.Agnhost)) {
		t.Errorf("agnhost dynamic: %v", err)
	}
}

// TestNamesMatchVersions: the image tags are the ones versions.env pins
// (and build.sh checks against the upstream sources).
func TestNamesMatchVersions(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, err := tools.ReadVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := "registry.k8s.io/pause:" + v.Pause; PauseImage != want {
		t.Errorf("PauseImage = %q, versions.env gives %q", PauseImage, want)
	}
	if want := "registry.k8s.io/e2e-test-images/agnhost:" + v.Agnhost; AgnhostImage != want {
		t.Errorf("AgnhostImage = %q, versions.env gives %q", AgnhostImage, want)
	}
	if want := "registry.k8s.io/coredns/coredns:" + v.CoreDNS; CoreDNSImage != want {
		t.Errorf("CoreDNSImage = %q, versions.env gives %q", CoreDNSImage, want)
	}
}

// TestMirrorRef: the repository is the upstream path without its host,
// what containerd asks a mirror of registry.k8s.io for.
func TestMirrorRef(t *testing.T) {
	for _, tc := range []struct {
		image, host, want, wantErr string
	}{
		{PauseImage, "127.0.0.1:5000", "127.0.0.1:5000/pause:3.10.2", ""},
		{AgnhostImage, "198.18.0.1:5000", "198.18.0.1:5000/e2e-test-images/agnhost:2.66.1", ""},
		{"registry.k8s.io/pause", "127.0.0.1:5000", "", "image name"}, // no tag: StrictValidation
		{PauseImage, "bad host", "", "registry host"},
	} {
		got, err := MirrorRef(tc.image, tc.host)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("MirrorRef(%q, %q): err %v, want one containing %q", tc.image, tc.host, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("MirrorRef(%q, %q) = %q, %v; want %q", tc.image, tc.host, got, err, tc.want)
		}
		if got.Scheme() != "http" {
			t.Errorf("MirrorRef(%q, %q): scheme %s, want http (the local registry is plain HTTP)", tc.image, tc.host, got.Scheme())
		}
	}
}

// TestWriteOCILayout: the layout's index names each image as containerd's
// export does (full name for ctr import, tag as the OCI ref name), at the
// digest Build gave it.
func TestWriteOCILayout(t *testing.T) {
	images, err := buildFake(t, fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteOCILayout(dir, images); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != len(images) {
		t.Fatalf("index.json has %d entries, want %d", len(m.Manifests), len(images))
	}
	for i, img := range images {
		d, _ := img.Image.Digest()
		e := m.Manifests[i]
		ref, _ := img.Ref()
		if e.Digest != d || e.Annotations[containerdImageName] != img.Name || e.Annotations[ociRefName] != ref.TagStr() {
			t.Errorf("entry %d: %s %v; want %s named %s, tag %s", i, e.Digest, e.Annotations, d, img.Name, ref.TagStr())
		}
		if _, err := idx.Image(d); err != nil {
			t.Errorf("%s: image not in the layout: %v", img.Name, err)
		}
	}

	archive := filepath.Join(t.TempDir(), "images.tar")
	if err := WriteArchive(archive, images); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	for _, n := range []string{"oci-layout", "index.json", "blobs/"} {
		if !names[n] {
			t.Errorf("archive lacks %s: %v", n, names)
		}
	}
}

// TestCoreDNSCapability: /coredns carries cap_net_bind_service=+ep (a
// revision 2 vfs_cap_data), as upstream's setcap gives it, so CoreDNS as
// the image's non-root user may bind port 53; no other file has
// capabilities.
func TestCoreDNSCapability(t *testing.T) {
	images, err := buildFake(t, fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		for path, h := range layerEntries(t, img.Image) {
			got := h.PAXRecords["SCHILY.xattr.security.capability"]
			if img.Name != CoreDNSImage || path != "coredns" {
				if got != "" {
					t.Errorf("%s %s has capabilities %x", img.Name, path, got)
				}
				continue
			}
			b := []byte(got)
			if len(b) != 20 {
				t.Fatalf("%s: security.capability is %d bytes (%x), want 20", path, len(b), b)
			}
			magic := binary.LittleEndian.Uint32(b[0:])
			permitted := binary.LittleEndian.Uint32(b[4:])
			if magic != 0x02000001 || permitted != 1<<10 || binary.LittleEndian.Uint32(b[8:]) != 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
				t.Errorf("%s: security.capability %x, want revision 2, effective, permitted CAP_NET_BIND_SERVICE (bit 10) only", path, b)
			}
		}
	}
}

// TestBuildTools: agnhost's tools layer is under its binary's, its history
// saying where it comes from; without the tools (packages missing) the
// image is refused, naming it and the cause.
func TestBuildTools(t *testing.T) {
	dir := fakeBinDir(t)
	images, err := buildFake(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		if img.Name != AgnhostImage {
			continue
		}
		cf, err := img.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if len(cf.History) != 2 || cf.History[0].CreatedBy != "fake tools" || cf.History[1].CreatedBy != "portside internal/nodeimages: /agnhost" {
			t.Errorf("history %+v: want the tools, then /agnhost", cf.History)
		}
		layers, _ := img.Image.Layers()
		want, _, _ := fakeTools("amd64")
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		_ = rc.Close()
		if string(got) != string(want) {
			t.Error("first layer is not the tools layer")
		}
	}
	_, err = buildAll(dir, func(string) ([]byte, string, error) {
		return nil, "", errors.New("Debian packages curl not installed")
	})
	if err == nil || !strings.Contains(err.Error(), AgnhostImage) || !strings.Contains(err.Error(), "curl not installed") {
		t.Errorf("tools missing: %v", err)
	}
}

// TestBuildE2EImage: the regression-issue-74839 image is built when the
// e2e tools directory holds its binary (the upstream e2e runner builds
// it), from that binary; without it Build makes the others and no error.
func TestBuildE2EImage(t *testing.T) {
	dir := fakeBinDir(t)
	images, err := buildFake(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		if img.Name == RegressionIssue74839Image {
			t.Fatalf("%s built without its binary", img.Name)
		}
	}
	e2eDir := tools.E2EDir(dir)
	if err := os.MkdirAll(e2eDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e2eDir, RegressionIssue74839), fakeELF(t, elf.ET_EXEC, elf.EM_X86_64, elf.PT_LOAD), 0o755); err != nil {
		t.Fatal(err)
	}
	with, err := buildFake(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(with) != len(images)+1 || with[len(with)-1].Name != RegressionIssue74839Image {
		t.Fatalf("with the binary: %d images, the last %q; want %d, the last %s", len(with), with[len(with)-1].Name, len(images)+1, RegressionIssue74839Image)
	}
	img := with[len(with)-1].Image
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/" + RegressionIssue74839}; !reflect.DeepEqual(cf.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", cf.Config.Entrypoint, want)
	}
	if h := layerEntries(t, img)[RegressionIssue74839]; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o005 != 0o005 {
		t.Errorf("binary entry %+v: want a regular file others may execute", h)
	}
}
