package nodeimages

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/portside-io/portside/internal/tools"
)

// Building the images is most of a warm `portside up`'s wait before its
// machines boot (6 s of gzip on 2 cores), and every real-node test paid it
// again; the images are the same bytes whenever their inputs are (fixed
// timestamps, sorted entries). So Cached keeps the last build as an OCI
// layout beside the tools, named by a fingerprint of every input, and
// reads it instead of building while nothing changed.

// cacheFormat changes whenever what Build makes from the same inputs
// does (a new spec, a layer's layout): a new format is a new key.
const cacheFormat = "nodeimages-cache/1"

// CacheDir is where Cached keeps builds for the tools of binDir.
func CacheDir(binDir string) string { return filepath.Join(filepath.Dir(binDir), "node-images") }

// inputStat is what the fingerprint knows of one input file.
type inputStat struct {
	path  string
	size  int64
	mtime int64 // nanoseconds
	// missing: the file is absent (an optional input: e2e binaries,
	// aliases); its absence is part of the key.
	missing bool
}

// cacheKey fingerprints a build's inputs: order-independent, and any
// change of a path, size, modification time or presence is a new key.
func cacheKey(format string, inputs []inputStat) string {
	lines := make([]string, len(inputs))
	for i, in := range inputs {
		if in.missing {
			lines[i] = in.path + " missing"
		} else {
			lines[i] = fmt.Sprintf("%s %d %d", in.path, in.size, in.mtime)
		}
	}
	slices.Sort(lines)
	h := sha256.New()
	h.Write([]byte(format + "\n" + strings.Join(lines, "\n")))
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// buildInputs are the files Build reads for binDir: the tools binaries
// and aliases, the e2e binaries, the host programs of the tools layer and
// dpkg's status (a package upgrade may change a shared library the tools
// layer copies without touching the programs).
func buildInputs(binDir string) []string {
	in := []string{filepath.Join(binDir, AliasesFile), "/var/lib/dpkg/status"}
	for _, s := range specs() {
		dir := binDir
		if s.e2e {
			dir = tools.E2EDir(binDir)
		}
		if s.binary != "" {
			in = append(in, filepath.Join(dir, s.binary))
		}
		for _, b := range s.extras {
			in = append(in, filepath.Join(binDir, b))
		}
	}
	in = append(in, filepath.Join(binDir, toolsArchBinary))
	for _, t := range agnhostTools {
		in = append(in, t.path)
	}
	slices.Sort(in)
	return slices.Compact(in)
}

func statInputs(paths []string) ([]inputStat, error) {
	out := make([]inputStat, len(paths))
	for i, p := range paths {
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out[i] = inputStat{path: p, missing: true}
		case err != nil:
			return nil, err
		default:
			out[i] = inputStat{path: p, size: st.Size(), mtime: st.ModTime().UnixNano()}
		}
	}
	return out, nil
}

// Cached is Build, from the cache when a build of the same inputs is
// there (true), else built and kept there for the next time. The cache
// is only an optimisation: one it cannot read or write is built around
// (a read-only tools directory builds every time).
func Cached(binDir string) ([]Image, bool, error) {
	return cached(binDir, CacheDir(binDir), buildInputs(binDir), Build)
}

func cached(binDir, root string, inputs []string, build func(string) ([]Image, error)) ([]Image, bool, error) {
	stats, err := statInputs(inputs)
	if err != nil {
		return nil, false, err
	}
	dir := filepath.Join(root, cacheKey(cacheFormat+"\n"+specsDigest(), stats))
	if imgs, err := readLayout(dir); err == nil {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // in use: not stale
		return imgs, true, nil
	}
	imgs, err := build(binDir)
	if err != nil {
		return nil, false, err
	}
	_ = keep(root, dir, imgs, time.Now())
	return imgs, false, nil
}

// specsDigest covers what the images are made of besides the input files
// (configs, embedded files: this binary's specs), so a new Portside with
// other specs does not read an older one's build.
func specsDigest() string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%#v", specs())))
	return hex.EncodeToString(h[:])
}

// staleAfter is when an unused build is removed: long after any `up` or
// test that read it has pushed it (they read blobs lazily: a build
// removed under a concurrent reader would fail its push).
const staleAfter = 24 * time.Hour

// keep writes imgs as the layout dir, whole or not at all (a temporary
// layout renamed into place, so a concurrent reader never sees half of
// one), and removes builds unused for staleAfter.
func keep(root, dir string, imgs []Image, now time.Time) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(root, ".build-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := WriteOCILayout(tmp, imgs); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err // another process kept the same build first
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		info, err := e.Info()
		if p := filepath.Join(root, e.Name()); err == nil && p != dir && now.Sub(info.ModTime()) > staleAfter {
			_ = os.RemoveAll(p)
		}
	}
	return nil
}

// readLayout reads WriteOCILayout's images back under their names, in
// the order they were written.
func readLayout(dir string) ([]Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) == 0 {
		return nil, fmt.Errorf("%s: no images", dir)
	}
	out := make([]Image, 0, len(m.Manifests))
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		n := d.Annotations[portsideImageName]
		if n == "" {
			return nil, fmt.Errorf("%s: image %s has no name", dir, d.Digest)
		}
		out = append(out, Image{Name: n, Image: img})
	}
	return out, nil
}
