package helm

import (
	"context"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/testenv"
)

// TestChartRBACCannotReadSecrets: the chart's rendered RBAC, applied for
// real to the test apiserver (defaults, with service-account credentials,
// with the network proxy), lets no subject it binds get, list or watch
// Secrets, across namespaces (-A) or in its own. TestRBACHasOneSourceOfTruth
// keeps the chart's files equal to deploy/'s, but this asks the apiserver
// about what the chart renders, so a template that adds a grant of its own
// is caught too. The CCM's own grants are asked as a control: a review that
// always said no would not pass.
func TestChartRBACCannotReadSecrets(t *testing.T) {
	admin := testenv.Client(t)
	for name, values := range map[string]map[string]any{
		"defaults":                        nil,
		"use-service-account-credentials": {"useServiceAccountCredentials": true},
		"network-proxy": {"networkProxy": map[string]any{"enabled": true,
			"agent": map[string]any{"proxyServerHost": "cp.example.com"}}},
	} {
		t.Run(name, func(t *testing.T) {
			var rbac []string
			type subject struct{ user, namespace string }
			var subjects []subject
			for _, o := range objects(t, mustRender(t, values)) {
				switch o.Kind {
				case "ServiceAccount", "ClusterRole", "Role":
				case "ClusterRoleBinding", "RoleBinding":
					var b rbacv1.RoleBinding // a ClusterRoleBinding decodes the same
					if err := yaml.Unmarshal(o.raw, &b); err != nil {
						t.Fatal(err)
					}
					for _, s := range b.Subjects {
						switch s.Kind {
						case "ServiceAccount":
							ns := s.Namespace
							if ns == "" {
								ns = b.Namespace
							}
							subjects = append(subjects, subject{"system:serviceaccount:" + ns + ":" + s.Name, ns})
						case "User":
							subjects = append(subjects, subject{s.Name, ""})
						default:
							t.Errorf("%s %s binds a %s (%s): ask the apiserver about it here", o.Kind, o.Name, s.Kind, s.Name)
						}
					}
				default:
					continue
				}
				rbac = append(rbac, string(o.raw))
			}
			if !slices.Contains(subjects, subject{"system:serviceaccount:kube-system:cloud-controller-manager", "kube-system"}) {
				t.Fatalf("the rendering binds nothing to the CCM's ServiceAccount: %v", subjects)
			}
			apply(t, strings.Join(rbac, "\n---\n"))
			seen := map[subject]bool{}
			for _, s := range subjects {
				if seen[s] {
					continue
				}
				seen[s] = true
				for _, ns := range []string{"", s.namespace, "default"} {
					for _, verb := range []string{"get", "list", "watch"} {
						if canI(t, admin, s.user, verb, "secrets", ns) {
							t.Errorf("%s may %s secrets in namespace %q (\"\" is -A)", s.user, verb, ns)
						}
					}
				}
			}
			for _, g := range [][2]string{{"list", "nodes"}, {"watch", "services"}} {
				if !canI(t, admin, "system:serviceaccount:kube-system:cloud-controller-manager", g[0], g[1], "") {
					t.Errorf("control: the CCM's ServiceAccount may not %s %s: the review or the applied rendering is wrong", g[0], g[1])
				}
			}
		})
	}
}

// apply creates or updates the objects for real (RBAC only: nothing runs).
func apply(t *testing.T, stream string) {
	t.Helper()
	kubectlApply(t, stream)
}

// canI is `kubectl auth can-i --as=user verb resource [-n namespace]`, as
// a SubjectAccessReview ("" namespace is -A). A ServiceAccount is asked with
// the groups its token carries.
func canI(t *testing.T, client kubernetes.Interface, user, verb, resource, namespace string) bool {
	t.Helper()
	groups := []string{"system:authenticated"}
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		ns, _, _ := strings.Cut(rest, ":")
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+ns)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: resource, Namespace: namespace}}}
	got, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s %s %s: %v", user, verb, resource, err)
	}
	return got.Status.Allowed
}
