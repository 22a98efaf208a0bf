package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
)

// DefaultImage is the repository deploy/ and the chart name.
const DefaultImage = "ghcr.io/portside-io/portside"

// imageLine matches a container image of Portside in a manifest.
var imageLine = regexp.MustCompile(`(?m)^(\s*(?:-\s+)?image:\s*)"?` + regexp.QuoteMeta(DefaultImage) + `(?::[^\s@"]+)?(?:@[^\s"]+)?"?[ \t]*$`)

// StampManifest points every Portside image in a manifest at ref (e.g.
// repo:tag@sha256:…), so what is applied runs exactly what was built. It
// returns how many it changed.
func StampManifest(manifest []byte, ref string) ([]byte, int) {
	n := 0
	out := imageLine.ReplaceAllFunc(manifest, func(m []byte) []byte {
		n++
		prefix := imageLine.FindSubmatch(m)[1]
		return append(append([]byte{}, prefix...), ref...)
	})
	return out, n
}

// Ref is repository:tag@digest.
func Ref(repository, tag, digest string) string {
	ref := repository + ":" + tag
	if digest != "" {
		ref += "@" + digest
	}
	return ref
}

var appVersionLine = regexp.MustCompile(`(?m)^appVersion:.*$`)

// PackageChart packs the chart in chart (an fs rooted at the chart's
// directory) as a .tgz Helm loads, with appVersion set to version: the
// chart's default image tag is then the version the build stamped. The
// archive is reproducible (sorted, fixed times).
func PackageChart(chart fs.FS, name, version string, mtime time.Time) ([]byte, error) {
	var files []string
	if err := fs.WalkDir(chart, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	sort.Strings(files)
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	gz.ModTime = mtime
	tw := tar.NewWriter(gz)
	stamped := false
	for _, p := range files {
		data, err := fs.ReadFile(chart, p)
		if err != nil {
			return nil, err
		}
		if p == "Chart.yaml" {
			if !appVersionLine.Match(data) {
				return nil, fmt.Errorf("the chart's Chart.yaml has no appVersion line to stamp")
			}
			data = appVersionLine.ReplaceAll(data, []byte(fmt.Sprintf("appVersion: %q", version)))
			stamped = true
		}
		if err := tw.WriteHeader(&tar.Header{Name: path.Join(name, p), Mode: 0o644, Size: int64(len(data)),
			ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if !stamped {
		return nil, fmt.Errorf("no Chart.yaml in the chart directory")
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ChartVersion reads the chart's version from its Chart.yaml.
func ChartVersion(chart fs.FS) (string, error) {
	data, err := fs.ReadFile(chart, "Chart.yaml")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "version:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`), nil
		}
	}
	return "", fmt.Errorf("the chart's Chart.yaml has no version")
}
