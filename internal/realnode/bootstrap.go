package realnode

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// bootstrapBindings let TLS-bootstrapping kubelets (group
// system:bootstrappers) ask for a client certificate and have
// kube-controller-manager approve it, and nodes renew their own, as
// kubeadm's bindings of the same roles do.
var bootstrapBindings = []struct{ name, role, group string }{
	{"portside:kubelet-bootstrap", "system:node-bootstrapper", "system:bootstrappers"},
	{"portside:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
	{"portside:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
}

// EnsureBootstrap makes the RBAC bindings TLS bootstrap needs and a fresh
// bootstrap token valid for ttl (kube-apiserver needs
// --enable-bootstrap-token-auth; KCM's token cleaner removes it once
// expired). It returns the token, "<id>.<secret>".
func EnsureBootstrap(ctx context.Context, client kubernetes.Interface, ttl time.Duration) (string, error) {
	for _, b := range bootstrapBindings {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name, Labels: map[string]string{"app.kubernetes.io/managed-by": "portside"}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.group}},
		}
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating ClusterRoleBinding %s: %w", b.name, err)
		}
	}
	id, err := randomToken(6)
	if err != nil {
		return "", err
	}
	secret, err := randomToken(16)
	if err != nil {
		return "", err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "portside"}},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "portside up: real nodes' TLS bootstrap",
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
		},
	}
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the bootstrap token: %w", err)
	}
	return id + "." + secret, nil
}

// randomToken is n characters of [a-z0-9], the bootstrap token alphabet.
func randomToken(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b), nil
}

// KubeProxyKubeconfig is kube-proxy's kubeconfig: a client certificate
// for system:kube-proxy, the user Kubernetes' default RBAC binds to
// system:node-proxier.
func KubeProxyKubeconfig(server, caFile, certFile, keyFile string) string {
	return kubeconfigYAML(server, caFile, "kube-proxy", fmt.Sprintf("{client-certificate: %q, client-key: %q}", certFile, keyFile))
}
