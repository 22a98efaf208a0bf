package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"testing"
	"testing/fstest"
	"time"
)

func TestStampManifest(t *testing.T) {
	const ref = "ghcr.io/portside-io/portside:v1.2.3-4-gabc@sha256:0123"
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{"tag", "      - name: ccm\n        image: ghcr.io/portside-io/portside:v0.1.0\n", "      - name: ccm\n        image: " + ref + "\n", 1},
		{"quoted", `  image: "ghcr.io/portside-io/portside:v0.1.0"` + "\n", "  image: " + ref + "\n", 1},
		{"list item", "  - image: ghcr.io/portside-io/portside\n", "  - image: " + ref + "\n", 1},
		{"digest", "image: ghcr.io/portside-io/portside:v0.1.0@sha256:ffff\n", "image: " + ref + "\n", 1},
		{"two", "image: ghcr.io/portside-io/portside:a\n---\nimage: ghcr.io/portside-io/portside:b\n", "image: " + ref + "\n---\nimage: " + ref + "\n", 2},
		{"other image kept", "image: registry.k8s.io/kas-network-proxy/proxy-agent:v0.34.0\n", "image: registry.k8s.io/kas-network-proxy/proxy-agent:v0.34.0\n", 0},
		{"lookalike kept", "image: ghcr.io/portside-io/portside-extra:v1\n", "image: ghcr.io/portside-io/portside-extra:v1\n", 0},
		{"comment kept", "# image: ghcr.io/portside-io/portside:v1\n", "# image: ghcr.io/portside-io/portside:v1\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := StampManifest([]byte(tc.in), ref)
			if string(got) != tc.want || n != tc.n {
				t.Errorf("got %q (%d), want %q (%d)", got, n, tc.want, tc.n)
			}
		})
	}
}

func TestPackageChart(t *testing.T) {
	chart := fstest.MapFS{
		"Chart.yaml":                {Data: []byte("apiVersion: v2\nname: portside\nversion: 0.1.0\nappVersion: \"v0.1.0\"\n")},
		"values.yaml":               {Data: []byte("image:\n  tag: \"\"\n")},
		"templates/deployment.yaml": {Data: []byte("kind: Deployment\n")},
	}
	mtime := time.Unix(1_700_000_000, 0)
	a, err := PackageChart(chart, "portside", "v1.2.3-4-gabc", mtime)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := PackageChart(chart, "portside", "v1.2.3-4-gabc", mtime)
	if !bytes.Equal(a, b) {
		t.Error("two packages of the same chart differ")
	}
	gz, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(data)
	}
	if want := "apiVersion: v2\nname: portside\nversion: 0.1.0\nappVersion: \"v1.2.3-4-gabc\"\n"; got["portside/Chart.yaml"] != want {
		t.Errorf("Chart.yaml %q, want %q", got["portside/Chart.yaml"], want)
	}
	if len(got) != 3 || got["portside/templates/deployment.yaml"] != "kind: Deployment\n" {
		t.Errorf("files %v", got)
	}
	if v, err := ChartVersion(chart); err != nil || v != "0.1.0" {
		t.Errorf("ChartVersion = %q, %v", v, err)
	}
	if _, err := PackageChart(fstest.MapFS{"values.yaml": {Data: []byte("x")}}, "portside", "v1", mtime); err == nil {
		t.Error("a chart without Chart.yaml packaged")
	}
}
