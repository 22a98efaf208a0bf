// Package credentialplugin is Portside's kubelet image credential provider:
// `portside credential-provider` and the lean `portside-credential-provider`
// binary both run Main. It picks a registered provider by name, so any
// provider compiled in serves the kubelet.
//
// It stays free of the manager's and client-go's packages on purpose: the
// kubelet execs it per uncached pull, and those packages' init alone costs
// more than the whole exec should (P6: 10 ms).
package credentialplugin

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/credentialprovider"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

// Usage is the help text; the flags follow it.
const Usage = `Kubelet image credential provider (credentialprovider.kubelet.k8s.io/v1).

The kubelet runs it per image pull (--image-credential-provider-config and
--image-credential-provider-bin-dir): it reads a CredentialProviderRequest on
stdin and writes a CredentialProviderResponse with a short-lived credential
from the cloud on stdout. See docs/credential-provider.md.

Flags:
`

// Main parses args (flags only) and answers one request; it returns the
// exit code.
func Main(program string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet(program, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	provider := fs.String("cloud-provider", "local", "provider whose registry-credentials capability answers (registered: "+fmt.Sprint(cloud.Registered())+")")
	config := fs.String("cloud-config", os.Getenv("PORTSIDE_CLOUD_CONFIG"), "the provider's cloud config file (default $PORTSIDE_CLOUD_CONFIG)")
	timeout := fs.Duration("timeout", credentialprovider.Timeout, "give up after this long (the kubelet kills plugins after 1m)")
	fs.Usage = func() { fmt.Fprint(stderr, Usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		return credentialprovider.Exit(stderr, program, err)
	}
	if fs.NArg() > 0 {
		return credentialprovider.Exit(stderr, program, fmt.Errorf("unexpected arguments %q: the request comes on stdin; set flags in args of the kubelet's CredentialProviderConfig", fs.Args()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return credentialprovider.Exit(stderr, program, run(ctx, *provider, *config, stdin, stdout))
}

func run(ctx context.Context, name, config string, stdin io.Reader, stdout io.Writer) error {
	// A malformed request is reported before the provider is set up.
	req, err := credentialprovider.ReadRequest(stdin)
	if err != nil {
		return err
	}
	p, err := cloud.New(ctx, name, config)
	if err != nil {
		return err
	}
	rc, ok := p.RegistryCredentials()
	if !ok {
		return fmt.Errorf("cloud provider %q has no registry-credentials capability: remove this plugin from the kubelet's CredentialProviderConfig", name)
	}
	return credentialprovider.Answer(ctx, rc, req, stdout)
}
