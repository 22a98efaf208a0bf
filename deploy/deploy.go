// Package deploy embeds the files of deploy/ that programs render, so a
// sample and what `portside up` writes cannot drift apart.
package deploy

import (
	_ "embed"
	"fmt"
	"strings"
)

var (
	//go:embed credential-provider/credential-provider-config.yaml
	credentialProviderConfig string
	//go:embed credential-provider/credential-provider-config-serviceaccount.yaml
	credentialProviderConfigServiceAccount string
)

// CredentialProviderConfig renders a sample kubelet CredentialProviderConfig
// (the service-account-token variant when serviceAccount) for a registry at
// registryHost, a plugin installed as pluginName and the provider's cloud
// config at cloudConfig; everything else is the sample as written.
func CredentialProviderConfig(serviceAccount bool, registryHost, pluginName, cloudConfig string) (string, error) {
	s := credentialProviderConfig
	if serviceAccount {
		s = credentialProviderConfigServiceAccount
	}
	for _, r := range []struct{ old, repl string }{
		{`"127.0.0.1:5000"`, `"` + registryHost + `"`},
		{"name: portside-credential-provider", "name: " + pluginName},
		{"--cloud-config=/etc/portside/cloud.yaml", "--cloud-config=" + cloudConfig},
	} {
		if !strings.Contains(s, r.old) {
			return "", fmt.Errorf("the sample CredentialProviderConfig no longer contains %q", r.old)
		}
		s = strings.ReplaceAll(s, r.old, r.repl)
	}
	return s, nil
}
