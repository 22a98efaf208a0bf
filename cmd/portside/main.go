// Command portside is the one Portside binary: the cloud controller manager,
// the local cloud, `portside up` and the other tools are its subcommands.
package main

import (
	"os"

	"github.com/portside-io/portside/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
