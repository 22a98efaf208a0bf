package helm

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/portside-io/portside/internal/image"
)

var imageRE = regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*"?([^"\s]+)"?\s*$`)

// TestReleaseReferencesStampedImage: `make image` packages the chart with
// appVersion = the stamped version, and stamps deploy/'s manifests with
// repo:tag@digest; the packaged chart, loaded and rendered by Helm, and the
// stamped manifests, applied to the apiserver, run exactly that image.
func TestReleaseReferencesStampedImage(t *testing.T) {
	const version = "v0.2.0-7-gabcdef0"
	tgz, err := image.PackageChart(os.DirFS(chartDir(t)), "portside", image.Tag(version), time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		t.Fatalf("helm cannot load the packaged chart: %v", err)
	}
	if c.Metadata.AppVersion != image.Tag(version) {
		t.Errorf("packaged appVersion %q, want %q", c.Metadata.AppVersion, image.Tag(version))
	}
	vals, err := chartutil.ToRenderValues(c, map[string]any{"networkProxy": map[string]any{"enabled": true}},
		chartutil.ReleaseOptions{Name: "portside", Namespace: "kube-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range files {
		all.WriteString(f + "\n")
	}
	imgs := imageRE.FindAllStringSubmatch(all.String(), -1)
	if len(imgs) < 3 {
		t.Fatalf("%d images rendered, want the CCM, proxy server and agent", len(imgs))
	}
	for _, m := range imgs {
		if m[1] != image.DefaultImage+":"+image.Tag(version) {
			t.Errorf("packaged chart renders image %s, want %s:%s", m[1], image.DefaultImage, image.Tag(version))
		}
	}

	ref := image.Ref("127.0.0.1:5000/portside/portside", image.Tag(version), "sha256:"+strings.Repeat("ab", 32))
	var stamped strings.Builder
	total := 0
	for _, rel := range []string{"ccm/deployment.yaml", "network-proxy/proxy-server.yaml", "network-proxy/proxy-agent.yaml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		out, n := image.StampManifest(data, ref)
		if n == 0 {
			t.Errorf("deploy/%s: no Portside image stamped", rel)
		}
		total += n
		for _, m := range imageRE.FindAllStringSubmatch(string(out), -1) {
			if strings.Contains(m[1], "portside") && m[1] != ref {
				t.Errorf("deploy/%s: image %s left unstamped", rel, m[1])
			}
		}
		// proxy-server.yaml is a static Pod for the kubelet's manifest
		// directory, not something to apply.
		if rel != "network-proxy/proxy-server.yaml" {
			stamped.WriteString("---\n" + string(out) + "\n")
		}
	}
	if total < 3 {
		t.Errorf("%d images stamped, want at least 3", total)
	}
	t.Log(dryRunApply(t, stamped.String()))
}
