package devenv

import (
	"context"
	"fmt"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/portside-io/portside/deploy"
)

// proxyServerUser is the proxy server's user, as in deploy/network-proxy.
const proxyServerUser = "system:konnectivity-server"

// proxyServerKubeconfig grants system:konnectivity-server what
// deploy/network-proxy/rbac.yaml grants it (Nodes and Events for agents'
// claims, TokenReviews, its Leases) and writes a kubeconfig with a client
// certificate for that user: the server reads what it must as it would in
// a cluster, never as admin.
func proxyServerKubeconfig(ctx context.Context, env *environment) (string, error) {
	rbac, err := deploy.NetworkProxyServerRBAC()
	if err != nil {
		return "", err
	}
	rb := env.client.RbacV1()
	apply := func(what string, create func() error, update func() error) error {
		err := create()
		if apierrors.IsAlreadyExists(err) {
			err = update()
		}
		if err != nil {
			return fmt.Errorf("granting %s %s: %w", proxyServerUser, what, err)
		}
		return nil
	}
	for _, o := range rbac.ClusterRoles {
		if err := apply("ClusterRole "+o.Name,
			func() error { _, err := rb.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := rb.ClusterRoles().Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Rules = o.Rules
				_, err = rb.ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return "", err
		}
	}
	for _, o := range rbac.ClusterRoleBindings {
		if err := apply("ClusterRoleBinding "+o.Name,
			func() error { _, err := rb.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := rb.ClusterRoleBindings().Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Subjects = o.Subjects // roleRef cannot change; the sample's is fixed
				_, err = rb.ClusterRoleBindings().Update(ctx, cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return "", err
		}
	}
	for _, o := range rbac.Roles {
		if err := apply("Role "+o.Namespace+"/"+o.Name,
			func() error { _, err := rb.Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := rb.Roles(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Rules = o.Rules
				_, err = rb.Roles(o.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return "", err
		}
	}
	for _, o := range rbac.RoleBindings {
		if err := apply("RoleBinding "+o.Namespace+"/"+o.Name,
			func() error {
				_, err := rb.RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
				return err
			},
			func() error {
				cur, err := rb.RoleBindings(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Subjects = o.Subjects
				_, err = rb.RoleBindings(o.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return "", err
		}
	}
	cert, err := env.cp.IssueClientCert("proxy-server-client", proxyServerUser)
	if err != nil {
		return "", err
	}
	// The admin kubeconfig's cluster (loopback URL and CA), another user.
	cfg, err := clientcmd.LoadFromFile(env.kubeconfig())
	if err != nil {
		return "", err
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil {
		return "", fmt.Errorf("%s has no current context", env.kubeconfig())
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{proxyServerUser: {ClientCertificate: cert.CertFile, ClientKey: cert.KeyFile}}
	kctx.AuthInfo = proxyServerUser
	path := filepath.Join(env.netproxy(), "proxy-server.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}
