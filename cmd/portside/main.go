// Command portside is the one Portside binary: the cloud controller manager,
// the local cloud, `portside up` and the other tools are its subcommands.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/credentialplugin"
)

func main() {
	// Installed as a kubelet credential plugin under a name of its own
	// (e.g. portside-credential-provider), the binary is that plugin.
	if name := filepath.Base(os.Args[0]); name != "portside" && strings.HasSuffix(name, "credential-provider") {
		os.Exit(credentialplugin.Main(name, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(cli.Execute())
}
