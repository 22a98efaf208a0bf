// Package deploy embeds the files of deploy/ that programs render, so a
// sample and what `portside up` writes cannot drift apart.
package deploy

import (
	_ "embed"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
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

//go:embed ccm/webhook.yaml
var ccmWebhook string

// PVLabelWebhookConfiguration is deploy/ccm/webhook.yaml's
// MutatingWebhookConfiguration as written, with clientConfig pointed at url
// (trusting caPEM) instead of the in-cluster Service, for a CCM outside the
// cluster (`portside up`, tests).
func PVLabelWebhookConfiguration(url string, caPEM []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	_, _, mwc, err := FindMutatingWebhookConfiguration(ccmWebhook)
	if err != nil {
		return nil, fmt.Errorf("deploy/ccm/webhook.yaml: %w", err)
	}
	if len(mwc.Webhooks) != 1 {
		return nil, fmt.Errorf("deploy/ccm/webhook.yaml: want one webhook, found %d", len(mwc.Webhooks))
	}
	mwc.Annotations = nil // cert-manager's: the CA comes with the URL
	mwc.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
	return mwc, nil
}

// FindMutatingWebhookConfiguration splits a multi-document manifest (as
// deploy/ccm/webhook.yaml) and returns its documents, the index of its one
// MutatingWebhookConfiguration and that object, parsed strictly.
func FindMutatingWebhookConfiguration(manifest string) ([]string, int, *admissionregistrationv1.MutatingWebhookConfiguration, error) {
	docs := strings.Split(manifest, "\n---")
	for i, doc := range docs {
		var probe metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			return nil, 0, nil, err
		}
		if probe.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := yaml.UnmarshalStrict([]byte(doc), mwc); err != nil {
			return nil, 0, nil, err
		}
		return docs, i, mwc, nil
	}
	return nil, 0, nil, fmt.Errorf("no MutatingWebhookConfiguration")
}

//go:embed network-proxy/rbac.yaml
var networkProxyRBAC string

// NetworkProxyRBAC is what deploy/network-proxy/rbac.yaml grants the proxy
// server's user (system:konnectivity-server), as written: `portside up`
// runs proxy-server with that identity and these grants, not as admin.
type NetworkProxyRBAC struct {
	ClusterRoles        []rbacv1.ClusterRole
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
	Roles               []rbacv1.Role
	RoleBindings        []rbacv1.RoleBinding
}

// NetworkProxyServerRBAC parses deploy/network-proxy/rbac.yaml (strictly: a
// field it does not know is an error, not dropped).
func NetworkProxyServerRBAC() (NetworkProxyRBAC, error) {
	var out NetworkProxyRBAC
	for i, doc := range strings.Split(networkProxyRBAC, "\n---") {
		var probe metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			return out, fmt.Errorf("deploy/network-proxy/rbac.yaml document %d: %w", i+1, err)
		}
		var err error
		switch probe.Kind {
		case "ClusterRole":
			out.ClusterRoles, err = appendStrict(out.ClusterRoles, doc)
		case "ClusterRoleBinding":
			out.ClusterRoleBindings, err = appendStrict(out.ClusterRoleBindings, doc)
		case "Role":
			out.Roles, err = appendStrict(out.Roles, doc)
		case "RoleBinding":
			out.RoleBindings, err = appendStrict(out.RoleBindings, doc)
		case "":
			continue // comments only
		default:
			err = fmt.Errorf("kind %s is not RBAC", probe.Kind)
		}
		if err != nil {
			return out, fmt.Errorf("deploy/network-proxy/rbac.yaml document %d: %w", i+1, err)
		}
	}
	if len(out.ClusterRoleBindings) == 0 {
		return out, fmt.Errorf("deploy/network-proxy/rbac.yaml binds nothing")
	}
	return out, nil
}

// appendStrict decodes doc strictly into a T and appends it.
func appendStrict[T any](list []T, doc string) ([]T, error) {
	var o T
	if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
		return list, err
	}
	return append(list, o), nil
}
