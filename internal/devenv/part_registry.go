package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// RegistryAudience is the service-account token audience the local cloud
// accepts from this cluster (the service-account-token sample's
// tokenAttributes.serviceAccountTokenAudience).
const RegistryAudience = "portside-local-registry"

// credentialPluginName is the plugin's name in the kubelet's config and its
// file in the plugin directory.
const credentialPluginName = "portside-credential-provider"

// setupRegistry seeds the cloud's registry with a small image, makes the
// cloud trust the cluster's service-account issuer, and writes what a
// kubelet needs to pull from it: the CredentialProviderConfigs, the plugin
// directory and the plugin's cloud config.
func setupRegistry(ctx context.Context, s *stack, env *environment) error {
	ref, err := registry.SeedServed(ctx, env.cloudClient, "")
	if err != nil {
		return fmt.Errorf("seed the registry: %w", err)
	}
	pub, err := env.cp.ServiceAccountPublicKeyPEM()
	if err != nil {
		return err
	}
	if _, err := env.cloudClient.PutTokenIssuer(ctx, api.TokenIssuer{
		Issuer: controlplane.ServiceAccountIssuer, Audiences: []string{RegistryAudience}, PublicKeysPEM: string(pub),
	}); err != nil {
		return fmt.Errorf("trust the cluster's token issuer: %w", err)
	}
	dir := env.credentialProvider()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	cloudConfig := filepath.Join(dir, "cloud.yaml")
	// The pull-only token (writeNodeToken), not the admin token: the
	// plugin runs on every node and needs nothing else.
	cfg := fmt.Sprintf("endpoint: %s\ntokenFile: %s\n", env.cloudEndpoint, filepath.Join(env.cloud(), nodePullTokenFile))
	if err := os.WriteFile(cloudConfig, []byte(cfg), 0o600); err != nil {
		return err
	}
	if err := linkPlugin(filepath.Join(dir, "bin", credentialPluginName)); err != nil {
		return err
	}
	for file, sa := range map[string]bool{"config.yaml": false, "config-serviceaccount.yaml": true} {
		data, err := deploy.CredentialProviderConfig(sa, env.registryHost, credentialPluginName, cloudConfig)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644); err != nil {
			return err
		}
	}
	if env.realNodes {
		// Real kubelets get their own config (the cloud at the gateway) in
		// their user data: the flags below are for a kubelet on the host.
		s.p.step("registry", "serving %s with %s; real kubelets pull its private images through %s (their --image-credential-provider-config is in their user data)",
			env.registryHost, ref, credentialPluginName)
		return nil
	}
	s.p.step("registry", "serving %s with %s; kubelet flags: --image-credential-provider-config=%s --image-credential-provider-bin-dir=%s",
		env.registryHost, ref, filepath.Join(dir, "config.yaml"), filepath.Join(dir, "bin"))
	return nil
}

// linkPlugin points path at the lean portside-credential-provider next to
// this binary, or else at this binary, which serves as the plugin under
// any name ending in "credential-provider".
func linkPlugin(path string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	target := exe
	if lean := filepath.Join(filepath.Dir(exe), credentialPluginName); isExecutable(lean) {
		target = lean
	}
	if cur, err := os.Readlink(path); err == nil && cur == target {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Symlink(target, path)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// realNodeCredentialProvider writes, into the machines' shared directory,
// what their kubelets need to pull the registry's private images, and
// returns the CredentialProviderConfig's path. The pods name images by the
// registry's own host (env.registryHost, what `portside cloud registries`
// lists and users push to), which each machine's containerd mirrors to the
// gateway, or by the gateway's name itself (the registry's alias in the
// VPC); matchImages is both, and the cloud signs credentials for either. The plugin runs inside the machine, whose loopback is its own:
// it reaches the cloud's API at the gateway (the cloud's vpc-endpoint),
// with the nodes' pull-only token, the narrowest the cloud issues
// (registry-pull-credentials and nothing else: no push, no instances).
func realNodeCredentialProvider(env *environment, shared string) (string, error) {
	endpoint, err := os.ReadFile(filepath.Join(env.cloud(), server.VPCEndpointFile))
	if err != nil {
		return "", fmt.Errorf("the cloud serves no API to its VPC: %w", err)
	}
	// A copy beside the config: the machine sees the host's files only
	// where its user data names them (a data directory under /var/lib is
	// hidden by the machine's own /var/lib, save the paths named).
	token, err := os.ReadFile(filepath.Join(env.cloud(), nodePullTokenFile))
	if err != nil {
		return "", err
	}
	tokenFile := filepath.Join(shared, nodePullTokenFile)
	if err := os.WriteFile(tokenFile, token, 0o600); err != nil {
		return "", err
	}
	cloudConfig := filepath.Join(shared, "cloud.yaml")
	cfg := fmt.Sprintf("endpoint: %s\ntokenFile: %s\n", strings.TrimSpace(string(endpoint)), tokenFile)
	if err := os.WriteFile(cloudConfig, []byte(cfg), 0o600); err != nil {
		return "", err
	}
	data, err := deploy.CredentialProviderConfig(false, env.registryHost, credentialPluginName, cloudConfig)
	if err != nil {
		return "", err
	}
	vpcHost, err := os.ReadFile(filepath.Join(env.cloud(), server.RegistryVPCEndpointFile))
	if err != nil {
		return "", fmt.Errorf("the cloud serves no registry to its VPC: %w", err)
	}
	if data, err = addMatchImage(data, env.registryHost, strings.TrimSpace(string(vpcHost))); err != nil {
		return "", err
	}
	path := filepath.Join(shared, "credential-provider.yaml")
	return path, os.WriteFile(path, []byte(data), 0o644)
}

// addMatchImage adds pattern to the matchImages entry after the one that
// is after (the sample has one, quoted).
func addMatchImage(config, after, pattern string) (string, error) {
	lines := strings.Split(config, "\n")
	for i, l := range lines {
		if prefix, ok := strings.CutSuffix(l, `"`+after+`"`); ok && strings.HasSuffix(strings.TrimSpace(prefix), "-") {
			lines = slices.Insert(lines, i+1, prefix+`"`+pattern+`"`)
			return strings.Join(lines, "\n"), nil
		}
	}
	return "", fmt.Errorf("the CredentialProviderConfig has no matchImages entry %q", after)
}
