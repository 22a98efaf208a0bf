package image

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var buildDate = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// fakeOptions builds Options over small fake binaries, one per platform.
func fakeOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	bins := map[Platform]string{}
	for _, p := range Platforms {
		path := filepath.Join(dir, p.OS+"_"+p.Architecture, "portside")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("fake portside for "+p.String()+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[p] = path
	}
	return Options{Version: "v1.2.3", Commit: "0123456789abcdef", BuildDate: buildDate, Binaries: bins}
}

func mustBuild(t *testing.T, o Options) v1.ImageIndex {
	t.Helper()
	idx, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestBuildIndex(t *testing.T) {
	o := fakeOptions(t)
	idx := mustBuild(t, o)
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type = %s, want %s", mt, types.OCIImageIndex)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(m.Manifests))
	}
	if got := m.Annotations["org.opencontainers.image.version"]; got != "v1.2.3" {
		t.Errorf("index version annotation = %q", got)
	}
	for i, want := range []Platform{LinuxAMD64, LinuxARM64} {
		d := m.Manifests[i]
		if d.Platform == nil || d.Platform.OS != want.OS || d.Platform.Architecture != want.Architecture {
			t.Errorf("manifest %d platform = %+v, want %s", i, d.Platform, want)
		}
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d media type = %s", i, d.MediaType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(want.String(), func(t *testing.T) { checkImage(t, img, want) })
	}
}

func checkImage(t *testing.T, img v1.Image, p Platform) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("config platform = %s/%s, want %s", cf.OS, cf.Architecture, p)
	}
	if !cf.Created.Time.Equal(buildDate) {
		t.Errorf("created = %v, want %v", cf.Created.Time, buildDate)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user = %q", c.User)
	}
	if strings.Join(c.Entrypoint, " ") != "/portside" || len(c.Cmd) != 0 {
		t.Errorf("entrypoint = %q, cmd = %q", c.Entrypoint, c.Cmd)
	}
	if c.WorkingDir != "/" {
		t.Errorf("working dir = %q", c.WorkingDir)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    "portside",
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "0123456789abcdef",
		"org.opencontainers.image.created":  "2026-03-04T05:06:07Z",
		"org.opencontainers.image.source":   DefaultSource,
		"org.opencontainers.image.licenses": DefaultLicenses,
	}
	for k, v := range wantLabels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if c.Labels["org.opencontainers.image.description"] == "" {
		t.Error("no description label")
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type = %s", mt)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type file struct {
		hdr  *tar.Header
		data string
	}
	files := map[string]file{}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{h, string(b)}
		names = append(names, h.Name)
		if !h.ModTime.Equal(buildDate) {
			t.Errorf("%s mtime = %v, want %v", h.Name, h.ModTime, buildDate)
		}
	}
	if got, want := strings.Join(names, " "), "etc/ etc/group etc/passwd home/ home/portside/ portside tmp/"; got != want {
		t.Errorf("layer entries = %s, want %s", got, want)
	}
	bin := files["portside"]
	if bin.hdr == nil || bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 || bin.hdr.Gid != 0 {
		t.Errorf("/portside header = %+v, want a 0755 root-owned file", bin.hdr)
	}
	if bin.data != "fake portside for "+p.String()+"\n" {
		t.Errorf("/portside = %q: not the %s binary", bin.data, p)
	}
	if pw := files["etc/passwd"].data; !strings.Contains(pw, "\nportside:x:65532:65532:") {
		t.Errorf("/etc/passwd has no portside user 65532:65532:\n%s", pw)
	}
	if g := files["etc/group"].data; !strings.Contains(g, "\nportside:x:65532:") {
		t.Errorf("/etc/group has no portside group 65532:\n%s", g)
	}
	tmp := files["tmp/"]
	if tmp.hdr == nil || tmp.hdr.Typeflag != tar.TypeDir || tmp.hdr.Mode != 0o1777 {
		t.Errorf("/tmp header = %+v, want a 1777 directory", tmp.hdr)
	}
	home := files["home/portside/"]
	if home.hdr == nil || home.hdr.Typeflag != tar.TypeDir || home.hdr.Uid != UID || home.hdr.Gid != GID || home.hdr.Mode != 0o700 {
		t.Errorf("home header = %+v, want a 0700 directory of 65532:65532", home.hdr)
	}
	for _, n := range []string{"etc/", "etc/group", "etc/passwd", "home/", "tmp/"} {
		if h := files[n].hdr; h != nil && (h.Uid != 0 || h.Gid != 0) {
			t.Errorf("%s owned by %d:%d, want 0:0", n, h.Uid, h.Gid)
		}
	}
}

func TestBuildReproducible(t *testing.T) {
	o := fakeOptions(t)
	d1, err := mustBuild(t, o).Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := mustBuild(t, o).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("two builds of the same inputs differ: %s, %s", d1, d2)
	}
	// A different build date is a different image.
	o.BuildDate = o.BuildDate.Add(time.Hour)
	d3, err := mustBuild(t, o).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d3 == d1 {
		t.Errorf("another build date gave the same digest %s", d3)
	}
}

func TestBuildErrors(t *testing.T) {
	o := fakeOptions(t)
	o.Version = ""
	if _, err := Build(context.Background(), o); err == nil {
		t.Error("no version: no error")
	}
	o = fakeOptions(t)
	o.Binaries = nil
	if _, err := Build(context.Background(), o); err == nil {
		t.Error("no binaries: no error")
	}
	o = fakeOptions(t)
	o.Binaries[LinuxARM64] = filepath.Join(t.TempDir(), "missing")
	if _, err := Build(context.Background(), o); err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("missing binary: error %v, want one naming linux/arm64", err)
	}
}

func TestWriteLayout(t *testing.T) {
	idx := mustBuild(t, fakeOptions(t))
	dir := filepath.Join(t.TempDir(), "oci")
	d, err := WriteLayout(dir, idx, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := idx.Digest(); d != want {
		t.Errorf("WriteLayout digest = %s, want %s", d, want)
	}
	for _, f := range []string{"oci-layout", "index.json", filepath.Join("blobs", d.Algorithm, d.Hex)} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	back, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := back.Digest(); got != d {
		t.Errorf("read back digest %s, want %s", got, d)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != d || top.Manifests[0].Annotations[RefNameAnnotation] != "v1.2.3" {
		t.Errorf("index.json = %s, want one entry, %s named v1.2.3", b, d)
	}
}

func TestTag(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                 "v1.2.3",
		"v1.2.3-4-gabcdef-dirty": "v1.2.3-4-gabcdef-dirty",
		"v1.2.3+meta":            "v1.2.3-meta",
		"":                       "latest",
		"-x":                     "v-x",
		strings.Repeat("a", 200): strings.Repeat("a", 128),
	} {
		if got := Tag(in); got != want {
			t.Errorf("Tag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParsePlatform(t *testing.T) {
	p, err := ParsePlatform("linux/arm64")
	if err != nil || p != LinuxARM64 {
		t.Errorf("ParsePlatform(linux/arm64) = %v, %v", p, err)
	}
	for _, bad := range []string{"", "linux", "linux/", "/amd64", "linux/arm/v7"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q): no error", bad)
		}
	}
}
