package migrate

import (
	"context"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portside-io/portside/internal/migrate"
	"github.com/portside-io/portside/internal/testenv"
)

// printedGrant returns the JSON patch the printed plan gives for role.
func printedGrant(t *testing.T, role string) []byte {
	t.Helper()
	for _, s := range migrate.LeaderMigrationPlan() {
		for _, a := range s.Actions {
			i := strings.Index(a, "role '"+role+"' --type=json -p '")
			if i < 0 {
				continue
			}
			rest := a[i+len("role '"+role+"' --type=json -p '"):]
			return []byte(rest[:strings.Index(rest, "'")])
		}
	}
	t.Fatalf("the plan has no patch for %s", role)
	return nil
}

// TestLeaderMigrationChecks against a real apiserver and its real RBAC:
// the migration Lease's access is asked as kube-controller-manager's user
// and the CCM's ServiceAccount (denied by the bootstrap roles, granted by
// the printed patch and deploy/ccm), the kube-controller-manager flags are
// read from mirror pods, and CSI readiness from each Node's CSINode.
func TestLeaderMigrationChecks(t *testing.T) {
	c := testenv.Client(t)
	ctx := context.Background()
	sfx := suffix()
	ready, bare := "mig-csi-ready-"+sfx, "mig-csi-bare-"+sfx
	extKCM, noElectKCM := "kube-controller-manager-mig-ext-"+sfx, "kube-controller-manager-mig-noelect-"+sfx
	pvName := "mig-lm-ebs-" + sfx

	for _, name := range []string{ready, bare} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "z"}},
			Spec: corev1.NodeSpec{ProviderID: "local://" + name}}
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	// The ready node's kubelet registered the EBS driver and migrated the plugin.
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: ready, Annotations: map[string]string{corev1.MigratedPluginsAnnotationKey: "kubernetes.io/aws-ebs,kubernetes.io/gce-pd"}},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "ebs.csi.aws.com", NodeID: "i-0" + sfx}}},
	}
	if _, err := c.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.StorageV1().CSINodes().Delete(ctx, ready, metav1.DeleteOptions{}) })
	// The CSIDriver object exists: the old check called that enough.
	drv := "ebs.csi.aws.com"
	if _, err := c.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: drv}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.StorageV1().CSIDrivers().Delete(ctx, drv, metav1.DeleteOptions{}) })
	createInTreePV(t, c, pvName, "1Gi", sfx)
	// kube-controller-manager N+1 told to enable leader migration (the old
	// plan's step 2), and one version N without leader election.
	for name, args := range map[string][]string{
		extKCM:     {"kube-controller-manager", "--cloud-provider=external", "--enable-leader-migration", "--leader-migration-config=/etc/leadermigration.conf"},
		noElectKCM: {"kube-controller-manager", "--cloud-provider=aws", "--leader-elect=false"},
	} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system",
				Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "0123456789abcdef"},
				Labels:      map[string]string{"component": "kube-controller-manager", "tier": "control-plane"}},
			Spec: corev1.PodSpec{NodeName: ready, Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.37.2", Command: args}}},
		}
		if _, err := c.CoreV1().Pods("kube-system").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.CoreV1().Pods("kube-system").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}

	noMigrationAccess := func(r *migrate.Report) []migrate.Finding { return findingsByID(r)["migration-lease-access"] }
	lease := "leases.coordination.k8s.io kube-system/cloud-provider-extraction-migration"

	// 1. Before the migration, with v1.37's bootstrap RBAC: its Role
	// system::leader-locking-kube-controller-manager allows every Lease in
	// kube-system, so only the CCM (no deploy/ccm RBAC yet) lacks it.
	rep, _ := runCheck(t)
	expectFinding(t, rep, "migration-lease-access", migrate.Warning, migrate.CCMSubjectName+": get "+lease, migrate.CCMSubjectName+": update "+lease)
	for _, f := range noMigrationAccess(rep) {
		for _, o := range f.Objects {
			if strings.HasPrefix(o, migrate.KCMUser+":") {
				t.Errorf("v1.37's bootstrap RBAC lets kube-controller-manager use the migration Lease, reported: %q", o)
			}
		}
	}
	expectFinding(t, rep, "kcm-external-leader-migration", migrate.Blocking, extKCM+" (--cloud-provider=external --enable-leader-migration)")
	expectFinding(t, rep, "kcm-leader-elect-off", migrate.Warning, noElectKCM)
	expectFinding(t, rep, "csi-driver-not-on-nodes", migrate.Blocking, bare+" (no CSINode)")
	for _, f := range findingsByID(rep)["csi-driver-not-on-nodes"] {
		for _, o := range f.Objects {
			if strings.HasPrefix(o, ready+" ") {
				t.Errorf("the node whose CSINode lists the driver is reported: %q", o)
			}
		}
	}
	if rep.Ready {
		t.Error("READY with kube-controller-manager N+1 running leader migration and a node without the CSI driver")
	}
	if len(rep.LeaderMigrationPlan) == 0 {
		t.Error("the JSON report has no leaderMigrationPlan")
	}

	// 2. A cluster whose kube-controller-manager Role allows only its own
	// lock (upstream's procedure assumes one: "the default permissions of
	// the controller manager allow only accesses to their main Lease"), with
	// a migration under way (the Lease exists): both gaps block.
	const kcmRole = "system::leader-locking-kube-controller-manager"
	orig, err := c.RbacV1().Roles("kube-system").Get(ctx, kcmRole, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("upstream's bootstrap Role %s: %v", kcmRole, err)
	}
	t.Cleanup(func() {
		cur, err := c.RbacV1().Roles("kube-system").Get(ctx, kcmRole, metav1.GetOptions{})
		if err == nil {
			cur.Rules = orig.Rules
			_, err = c.RbacV1().Roles("kube-system").Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("clean-up: restoring %s: %v", kcmRole, err)
		}
	})
	narrowed := orig.DeepCopy()
	narrowed.Rules = nil
	for _, r := range orig.Rules {
		if !slices.Contains(r.Resources, "leases") {
			narrowed.Rules = append(narrowed.Rules, r)
		}
	}
	if _, err := c.RbacV1().Roles("kube-system").Update(ctx, narrowed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ml := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: migrate.LeaseMigration, Namespace: "kube-system"}}
	if _, err := c.CoordinationV1().Leases("kube-system").Create(ctx, ml, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CoordinationV1().Leases("kube-system").Delete(ctx, migrate.LeaseMigration, metav1.DeleteOptions{})
	})
	rep, _ = runCheck(t)
	expectFinding(t, rep, "migration-lease-access", migrate.Blocking,
		migrate.KCMUser+": get "+lease, migrate.KCMUser+": update "+lease, migrate.CCMSubjectName+": get "+lease, migrate.CCMSubjectName+": update "+lease)

	// 3. The printed grant for kube-controller-manager, applied as printed,
	// and deploy/ccm's RBAC for the CCM: nothing missing.
	if _, err := c.RbacV1().Roles("kube-system").Patch(ctx, kcmRole, types.JSONPatchType, printedGrant(t, kcmRole), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the printed patch of %s: %v", kcmRole, err)
	}
	applyCCMRBAC(t, c)
	// The kubelet registers the driver on the other node too.
	bareCSI := csiNode.DeepCopy()
	bareCSI.Name, bareCSI.ResourceVersion = bare, ""
	if _, err := c.StorageV1().CSINodes().Create(ctx, bareCSI, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.StorageV1().CSINodes().Delete(ctx, bare, metav1.DeleteOptions{}) })
	rep, _ = runCheck(t)
	if fs := noMigrationAccess(rep); fs != nil {
		t.Errorf("after the printed grant and deploy/ccm's RBAC: %+v", fs)
	}
	for _, f := range findingsByID(rep)["csi-driver-not-on-nodes"] {
		for _, o := range f.Objects {
			if strings.HasPrefix(o, ready+" ") || strings.HasPrefix(o, bare+" ") {
				t.Errorf("a node whose CSINode lists the driver is reported: %q", o)
			}
		}
	}
	// The kept Role rules: kube-controller-manager still reaches its own lock.
	after, err := c.RbacV1().Roles("kube-system").Get(ctx, kcmRole, metav1.GetOptions{})
	if err != nil || len(after.Rules) != len(narrowed.Rules)+1 {
		t.Errorf("the printed patch must add one rule and keep the %d others: %v %+v", len(narrowed.Rules), err, after)
	}
}
