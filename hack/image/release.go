package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/portside-io/portside/internal/image"
)

// writeRelease writes deploy/'s manifests with every Portside image set to
// ref, and the chart packaged with appVersion = the image's tag (its
// default tag), so what is applied runs what was built.
func writeRelease(dir, ref, version string, date time.Time) error {
	tag := image.Tag(version)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	stamped := 0
	for _, sub := range []string{"ccm", "network-proxy"} {
		src := filepath.Join("deploy", sub)
		entries, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("run from the repository's root: %w", err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "manifests", sub), 0o755); err != nil {
			return err
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				return err
			}
			out, n := image.StampManifest(data, ref)
			stamped += n
			if err := os.WriteFile(filepath.Join(dir, "manifests", sub, e.Name()), out, 0o644); err != nil {
				return err
			}
		}
	}
	if stamped == 0 {
		return fmt.Errorf("no %s image in deploy/ccm or deploy/network-proxy to stamp", image.DefaultImage)
	}
	chart := os.DirFS(filepath.Join("deploy", "helm", "portside"))
	chartVersion, err := image.ChartVersion(chart)
	if err != nil {
		return err
	}
	tgz, err := image.PackageChart(chart, "portside", tag, date)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "portside-"+chartVersion+".tgz"), tgz, 0o644)
}
