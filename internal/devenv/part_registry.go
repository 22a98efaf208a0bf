package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/portside-io/portside/deploy"
	"github.com/portside-io/portside/internal/controlplane"
	"github.com/portside-io/portside/internal/localcloud/registry"
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
