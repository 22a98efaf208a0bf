// Command gen-reference writes docs/reference/commands.md from the portside
// command tree (run from the repository's root).
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/portside-io/portside/internal/cli"
)

func main() {
	var b bytes.Buffer
	if err := cli.WriteCommandReference(&b); err != nil {
		fmt.Fprintln(os.Stderr, "gen-reference:", err)
		os.Exit(1)
	}
	if err := os.WriteFile("docs/reference/commands.md", b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen-reference:", err)
		os.Exit(1)
	}
}
