package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/image"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
)

// TestPushTargetLocalCloud: --local-cloud-data-dir without --push pushes to
// <registry-endpoint>/portside/portside:<tag> with a push credential.
func TestPushTargetLocalCloud(t *testing.T) {
	c := localcloudtest.Start(t)
	dir := t.TempDir()
	for f, v := range map[string]string{"endpoint": c.Endpoint, "token": c.Token, "registry-endpoint": c.RegistryHost} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref, auth, err := pushTarget(ctx, options{version: "v1.2.3+dirty", cloudDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if want := c.RegistryHost + "/portside/portside:v1.2.3-dirty"; ref.Name() != want {
		t.Errorf("ref = %s, want %s", ref.Name(), want)
	}
	bin := filepath.Join(t.TempDir(), "portside")
	if err := os.WriteFile(bin, []byte("fake"), 0o755); err != nil {
		t.Fatal(err)
	}
	idx, err := image.Build(ctx, image.Options{Version: "v1.2.3", Commit: "c", Binaries: map[image.Platform]string{image.LinuxAMD64: bin}})
	if err != nil {
		t.Fatal(err)
	}
	if err := image.Push(ctx, idx, ref, auth); err != nil {
		t.Fatal(err)
	}

	if _, _, err := pushTarget(ctx, options{version: "v1", cloudDir: t.TempDir()}); err == nil {
		t.Error("a data dir without endpoint: no error")
	}
}

func TestClearLayout(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := clearLayout(other); err == nil {
		t.Error("clearing a directory that is no OCI layout: no error")
	}
	if _, err := os.Stat(filepath.Join(other, "precious")); err != nil {
		t.Error(err)
	}
	layout := filepath.Join(dir, "oci")
	if err := os.MkdirAll(filepath.Join(layout, "blobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := clearLayout(layout); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layout); !os.IsNotExist(err) {
		t.Errorf("layout not removed: %v", err)
	}
	if err := clearLayout(filepath.Join(dir, "missing")); err != nil {
		t.Error(err)
	}
}

func TestBuildDate(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	d, err := buildDate(context.Background(), "")
	if err != nil || !d.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("SOURCE_DATE_EPOCH: %v, %v", d, err)
	}
	d, err = buildDate(context.Background(), "2026-01-02T03:04:05Z")
	if err != nil || !d.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("--build-date: %v, %v", d, err)
	}
	if _, err := buildDate(context.Background(), "yesterday"); err == nil {
		t.Error("bad --build-date: no error")
	}
}
