package deploy

import "testing"

// TestNetworkProxyServerRBAC: the sample's grants parse, and every binding
// is to the proxy server's user only.
func TestNetworkProxyServerRBAC(t *testing.T) {
	r, err := NetworkProxyServerRBAC()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ClusterRoles) != 1 || len(r.ClusterRoleBindings) != 2 || len(r.Roles) != 1 || len(r.RoleBindings) != 1 {
		t.Fatalf("got %d ClusterRoles, %d ClusterRoleBindings, %d Roles, %d RoleBindings; want 1, 2, 1, 1",
			len(r.ClusterRoles), len(r.ClusterRoleBindings), len(r.Roles), len(r.RoleBindings))
	}
	for _, b := range r.ClusterRoleBindings {
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != "User" || b.Subjects[0].Name != "system:konnectivity-server" {
			t.Errorf("ClusterRoleBinding %s binds %+v", b.Name, b.Subjects)
		}
	}
	for _, b := range r.RoleBindings {
		if len(b.Subjects) != 1 || b.Subjects[0].Name != "system:konnectivity-server" || b.Namespace != "kube-system" {
			t.Errorf("RoleBinding %s/%s binds %+v", b.Namespace, b.Name, b.Subjects)
		}
	}
}
