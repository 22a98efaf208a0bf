package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/localcloud/store"
)

// TestDamagedStateFileIsReported: the cloud does not start on a damaged
// state file, and says which file and how to get going again.
func TestDamagedStateFileIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	srv, err := New(context.Background(), path, testPools())
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(data[:8192]) // both meta pages
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), path, testPools())
	if !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("got %v, want a damaged state file error", err)
	}
	if want := "mv " + path + " " + path + ".damaged"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if err := os.Rename(path, path+".damaged"); err != nil {
		t.Fatal(err)
	}
	srv, err = New(context.Background(), path, testPools())
	if err != nil {
		t.Fatalf("after moving the damaged file aside: %v", err)
	}
	srv.Close()
}
