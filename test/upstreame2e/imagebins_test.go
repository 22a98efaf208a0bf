package upstreame2e

import (
	"context"
	"debug/elf"
	"path/filepath"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/tools"
)

// TestBuildImageBinaries: every image binary the runner builds is there
// afterwards and static, as internal/nodeimages takes it (an image without
// a libc cannot run a dynamically linked one).
func TestBuildImageBinaries(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := BuildImageBinaries(ctx, root, dir); err != nil {
		t.Fatal(err)
	}
	for _, b := range imageBinaries {
		f, err := elf.Open(filepath.Join(dir, b.name))
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", b.name)
			}
		}
		_ = f.Close()
	}
}
