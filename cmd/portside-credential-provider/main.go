// Command portside-credential-provider is Portside's kubelet image
// credential provider as a lean binary (the same code as `portside
// credential-provider`, without the rest of portside to start): install it
// under any name in the kubelet's --image-credential-provider-bin-dir.
package main

import (
	"os"
	"path/filepath"

	"github.com/portside-io/portside/internal/credentialplugin"
)

func main() {
	os.Exit(credentialplugin.Main(filepath.Base(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
