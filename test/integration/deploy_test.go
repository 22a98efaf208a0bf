package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	path, err := tools.Path(bin, tools.Kubectl)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, append([]string{"--kubeconfig", testenv.Kubeconfig(t)}, args...)...).CombinedOutput()
	return string(out), err
}

func deployDir(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy", "ccm")
}

// TestDeployManifestsAcceptedByTheAPIServer: the CCM's ServiceAccount, RBAC
// and Deployment pass server-side validation and admission.
func TestDeployManifestsAcceptedByTheAPIServer(t *testing.T) {
	out, err := kubectl(t, "apply", "--dry-run=server", "-f", deployDir(t))
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
	}
	for _, want := range []string{"serviceaccount/cloud-controller-manager", "clusterrole.rbac.authorization.k8s.io/system:portside:cloud-controller-manager",
		"deployment.apps/portside-cloud-controller-manager", "(server dry run)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRBACIsLeastPrivilege: no wildcard anywhere, and the ServiceAccount can
// do what the CCM needs and nothing broader.
func TestRBACIsLeastPrivilege(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir(t), "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj struct {
			Rules []struct {
				APIGroups, Resources, Verbs []string
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		for _, r := range obj.Rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
				for _, v := range list {
					if strings.Contains(v, "*") {
						t.Errorf("wildcard %q in rule %+v", v, r)
					}
				}
			}
		}
	}
	if out, err := kubectl(t, "apply", "-f", filepath.Join(deployDir(t), "serviceaccount.yaml"), "-f", filepath.Join(deployDir(t), "rbac.yaml")); err != nil {
		t.Fatalf("apply RBAC: %v\n%s", err, out)
	}
	sa := "--as=system:serviceaccount:kube-system:cloud-controller-manager"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"patch", "nodes"}, "yes"},
		{[]string{"delete", "nodes"}, "yes"},
		{[]string{"patch", "nodes/status"}, "yes"},
		{[]string{"patch", "services", "--subresource=status"}, "yes"},
		{[]string{"update", "services", "--subresource=status"}, "no"},
		{[]string{"patch", "services"}, "no"},
		{[]string{"get", "namespaces/kube-system"}, "yes"},
		{[]string{"get", "namespaces/default"}, "no"},
		{[]string{"create", "events"}, "yes"},
		{[]string{"create", "tokenreviews.authentication.k8s.io"}, "yes"},
		{[]string{"create", "subjectaccessreviews.authorization.k8s.io"}, "yes"},
		{[]string{"update", "leases/cloud-controller-manager", "-n", "kube-system"}, "yes"},
		{[]string{"update", "leases/cloud-provider-extraction-migration", "-n", "kube-system"}, "yes"},
		{[]string{"update", "leases/kube-controller-manager", "-n", "kube-system"}, "no"},
		{[]string{"delete", "services"}, "no"},
		{[]string{"get", "secrets", "-A"}, "no"},
		{[]string{"list", "secrets", "-A"}, "no"},
		{[]string{"watch", "secrets", "-A"}, "no"},
		{[]string{"create", "pods", "-A"}, "no"},
	} {
		out, _ := kubectl(t, append([]string{"auth", "can-i", sa}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n") // warnings come first
		if got := lines[len(lines)-1]; got != tc.want {
			t.Errorf("can-i %v = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestServiceAccountCredentialsRBAC: with --use-service-account-credentials
// the CCM may make its controllers' ServiceAccounts and request their
// tokens, and no other ServiceAccount's.
func TestServiceAccountCredentialsRBAC(t *testing.T) {
	dir := deployDir(t)
	if out, err := kubectl(t, "apply", "-f", filepath.Join(dir, "serviceaccount.yaml"), "-f", filepath.Join(dir, "rbac-service-account-credentials.yaml")); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	sa := "--as=system:serviceaccount:kube-system:cloud-controller-manager"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "serviceaccounts", "-n", "kube-system"}, "yes"},
		{[]string{"get", "serviceaccounts/service-controller", "-n", "kube-system"}, "yes"},
		{[]string{"create", "serviceaccounts/service-controller", "--subresource=token", "-n", "kube-system"}, "yes"},
		{[]string{"create", "serviceaccounts/node-controller", "--subresource=token", "-n", "kube-system"}, "yes"},
		{[]string{"create", "serviceaccounts/default", "--subresource=token", "-n", "kube-system"}, "no"},
		{[]string{"create", "serviceaccounts/route-controller", "--subresource=token", "-n", "default"}, "no"},
		{[]string{"get", "serviceaccounts/default", "-n", "kube-system"}, "no"},
	} {
		out, _ := kubectl(t, append([]string{"auth", "can-i", sa}, tc.args...)...)
		if got := strings.TrimSpace(out); got != tc.want {
			t.Errorf("can-i %v = %q, want %q", tc.args, got, tc.want)
		}
	}
}
