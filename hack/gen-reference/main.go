// Command gen-reference writes the generated pages of docs/reference (run
// from the repository's root): commands.md from the portside command tree,
// metrics.md from the components' metric registries and events.md from the
// controllers' event and condition reason constants.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/reference"
)

func main() {
	pages := []struct {
		file  string
		write func(io.Writer) error
	}{
		{"commands.md", cli.WriteCommandReference},
		{"metrics.md", reference.WriteMetricsReference},
		{"events.md", func(w io.Writer) error { return reference.WriteEventsReference(w, ".") }},
	}
	for _, p := range pages {
		var b bytes.Buffer
		if err := p.write(&b); err != nil {
			fmt.Fprintf(os.Stderr, "gen-reference: %s: %v\n", p.file, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join("docs", "reference", p.file), b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen-reference:", err)
			os.Exit(1)
		}
	}
}
