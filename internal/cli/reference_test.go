package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/portside-io/portside/internal/tools"
)

// TestCommandReferenceIsCurrent: docs/reference/commands.md is what the
// command tree generates; regenerate it with `go run ./hack/gen-reference`.
func TestCommandReferenceIsCurrent(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := WriteCommandReference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "reference", "commands.md"))
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("docs/reference/commands.md is stale (%v): run `go run ./hack/gen-reference`", err)
	}
}
