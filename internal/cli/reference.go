package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// WriteCommandReference writes docs/reference/commands.md: every command of
// the cobra tree with its flags (name, type, default, usage), hidden ones
// left out. A test keeps the file in step with the tree.
func WriteCommandReference(w io.Writer) error {
	root := NewRootCommand()
	fmt.Fprintln(w, "# Command reference")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Generated from the `portside` command tree by `go run ./hack/gen-reference`; `make test` fails when it is stale.")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || (c.Name() == "help" && c.Parent() != nil) || c.Name() == "completion" {
			return
		}
		fmt.Fprintf(w, "\n## `%s`\n\n%s\n", c.CommandPath(), strings.TrimSpace(c.Short))
		if c.Runnable() {
			fmt.Fprintf(w, "\n```\n%s\n```\n", c.UseLine())
		}
		flags := c.NonInheritedFlags()
		var rows []string
		flags.VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			name := "--" + f.Name
			if f.Shorthand != "" {
				name = "-" + f.Shorthand + ", " + name
			}
			def := f.DefValue
			if def == "" || def == "[]" {
				def = ""
			} else {
				def = "`" + def + "`"
			}
			usage := strings.ReplaceAll(strings.ReplaceAll(f.Usage, "\n", " "), "|", "\\|")
			rows = append(rows, fmt.Sprintf("| `%s` | %s | %s | %s |", name, f.Value.Type(), def, usage))
		})
		if len(rows) > 0 {
			sort.Strings(rows)
			fmt.Fprintf(w, "\n| flag | type | default | |\n|---|---|---|---|\n%s\n", strings.Join(rows, "\n"))
		}
		subs := c.Commands()
		sort.Slice(subs, func(i, j int) bool { return subs[i].Name() < subs[j].Name() })
		for _, s := range subs {
			walk(s)
		}
	}
	walk(root)
	return nil
}
