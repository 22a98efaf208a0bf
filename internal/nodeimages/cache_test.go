package nodeimages

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCacheKey: the key is a function of the inputs alone, whatever
// their order; a path, size, time or presence changed is a new key.
func TestCacheKey(t *testing.T) {
	base := []inputStat{{path: "/a", size: 1, mtime: 10}, {path: "/b", size: 2, mtime: 20}, {path: "/c", missing: true}}
	key := cacheKey("f", base)
	tests := []struct {
		name   string
		format string
		inputs []inputStat
		same   bool
	}{
		{"same", "f", base, true},
		{"reordered", "f", []inputStat{base[2], base[0], base[1]}, true},
		{"other format", "g", base, false},
		{"size", "f", []inputStat{{path: "/a", size: 9, mtime: 10}, base[1], base[2]}, false},
		{"mtime", "f", []inputStat{{path: "/a", size: 1, mtime: 11}, base[1], base[2]}, false},
		{"path", "f", []inputStat{{path: "/A", size: 1, mtime: 10}, base[1], base[2]}, false},
		{"appeared", "f", []inputStat{base[0], base[1], {path: "/c", size: 0, mtime: 0}}, false},
		{"one fewer", "f", base[:2], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cacheKey(tt.format, tt.inputs); (got == key) != tt.same {
				t.Errorf("key %s vs %s: same=%v, want %v", got, key, got == key, tt.same)
			}
		})
	}
}

// TestSpecsDigestStable: the specs' digest is the same every time (no
// pointer addresses or map order in it), or no build would ever be read
// back.
func TestSpecsDigestStable(t *testing.T) {
	if a, b := specsDigest(), specsDigest(); a != b {
		t.Fatalf("specs digests %s and %s", a, b)
	}
}

// TestCached: the first call builds and keeps the images, the second
// reads the same images (names, order, digests) back without building; a
// changed input builds again; a cache directory that cannot be written
// still gives the images.
func TestCached(t *testing.T) {
	dir := fakeBinDir(t)
	root := filepath.Join(t.TempDir(), "cache")
	inputs := []string{filepath.Join(dir, "pause"), filepath.Join(dir, "agnhost"), filepath.Join(dir, "absent")}
	builds := 0
	build := func(d string) ([]Image, error) { builds++; return buildFake(t, d) }
	first, hit, err := cached(dir, root, inputs, build)
	if err != nil || hit || builds != 1 {
		t.Fatalf("first: hit %v, %d builds, %v; want a build", hit, builds, err)
	}
	second, hit, err := cached(dir, root, inputs, build)
	if err != nil || !hit || builds != 1 {
		t.Fatalf("second: hit %v, %d builds, %v; want the cached build", hit, builds, err)
	}
	if len(second) != len(first) {
		t.Fatalf("%d images read back, want %d", len(second), len(first))
	}
	for i := range first {
		da, _ := first[i].Image.Digest()
		db, err := second[i].Image.Digest()
		if err != nil || first[i].Name != second[i].Name || da != db {
			t.Errorf("image %d: %s %s (%v) read back, want %s %s", i, second[i].Name, db, err, first[i].Name, da)
		}
		la, _ := second[i].Image.Layers()
		for _, l := range la {
			if _, err := l.Compressed(); err != nil {
				t.Errorf("%s: a layer of the cached build does not read: %v", second[i].Name, err)
			}
		}
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(inputs[0], later, later); err != nil {
		t.Fatal(err)
	}
	if _, hit, err := cached(dir, root, inputs, build); err != nil || hit || builds != 2 {
		t.Fatalf("after an input changed: hit %v, %d builds, %v; want a new build", hit, builds, err)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 2 {
		t.Errorf("%d builds kept, want both (the older one is not yet stale)", len(entries))
	}
	ro := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(ro, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if imgs, hit, err := cached(dir, filepath.Join(ro, "cache"), inputs, build); err != nil || hit || len(imgs) != len(first) {
		t.Fatalf("unwritable cache: %d images, hit %v, %v; want the images built", len(imgs), hit, err)
	}
}

// TestKeepRemovesStale: builds unused for staleAfter are removed when a
// new one is kept; recent ones (a concurrent run's) stay.
func TestKeepRemovesStale(t *testing.T) {
	root := t.TempDir()
	old, recent := filepath.Join(root, "old"), filepath.Join(root, "recent")
	for _, d := range []string{old, recent} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if err := os.Chtimes(old, now.Add(-staleAfter-time.Hour), now.Add(-staleAfter-time.Hour)); err != nil {
		t.Fatal(err)
	}
	imgs, err := buildFake(t, fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := keep(root, filepath.Join(root, "new"), imgs, now); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{old: false, recent: true, filepath.Join(root, "new"): true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}

// buildGolden are the digests Build makes of fakeBinDir's binaries and
// fakeTools. Cached reads an old build back while the input files are
// unchanged, so a change of what Build makes from the same files (a
// layer's layout, a config) must come with a new cacheFormat.
var buildGolden = map[string]string{
	"registry.k8s.io/pause:3.10.2":                            "sha256:c36bd457336847834b4b76fd9e1450394f6ed94a20415ad8bd960b6fc0cd909d",
	"registry.k8s.io/e2e-test-images/agnhost:2.66.1":          "sha256:ef2d9a8f00dfb1bea5a42e57e1e8dd686c54dc699539eb802b3215632e0bb363",
	"registry.k8s.io/coredns/coredns:v1.14.6":                 "sha256:bb39e505e4725c2d2747e2032802ad9998305ba5c077c0e8a69ad9eef7338b86",
	"registry.k8s.io/e2e-test-images/busybox:1.37.0-2":        "sha256:0aecec778d7345397b8f18c86a3ce593932a160d60699e35a5bc58d31c090949",
	"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1": "sha256:f6d0eef021ee4f4af22507784520dc7213c3b07c26efb2e4671d5a9dc0029657",
}

func TestCacheFormatFollowsBuild(t *testing.T) {
	imgs, err := buildFake(t, fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		d, err := img.Image.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := buildGolden[img.Name]; !ok || want != d.String() {
			t.Errorf("%s: Build made %s, buildGolden has %q: what Build makes from the same inputs changed; bump cacheFormat in cache.go (or a cached older build is read back) and update buildGolden", img.Name, d, want)
		}
	}
	if len(imgs) != len(buildGolden) {
		t.Errorf("%d images built, buildGolden has %d", len(imgs), len(buildGolden))
	}
}
