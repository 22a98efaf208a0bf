package migrate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Checks of what upstream's leader-migration procedure (plan.go) and CSI
// migration need before the in-tree provider goes.

// Subjects of the migration-lease checks: kube-controller-manager's user
// (upstream's bootstrap RBAC and kubeadm's kubeconfig name it so) and the
// CCM's ServiceAccount (deploy/ccm).
const (
	KCMUser        = "system:kube-controller-manager"
	CCMSubjectName = "system:serviceaccount:" + CCMNamespace + ":" + CCMServiceAccount
)

// SubjectAccess is an AccessCheck asked for a named subject.
type SubjectAccess struct {
	Subject string
	AccessCheck
}

// MigrationAccessChecks are the verbs both components need on the migration
// Lease: leader election reads it (get) and renews or takes it (update).
func MigrationAccessChecks() []SubjectAccess {
	var out []SubjectAccess
	for _, who := range []string{KCMUser, CCMSubjectName} {
		for _, verb := range []string{"get", "update"} {
			out = append(out, SubjectAccess{Subject: who, AccessCheck: AccessCheck{
				Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace, Name: LeaseMigration}})
		}
	}
	return out
}

// MigrationLeaseAccess: a component that may not get and update the
// migration Lease never acquires it, so the controllers it should take over
// stay unrun. Blocking once a migration is under way (the migration lease
// exists), a warning before (leader migration is optional).
func MigrationLeaseAccess(checks []SubjectAccess, migrationStarted bool) *Finding {
	var missing []string
	for _, c := range checks {
		switch {
		case c.Err != "":
			missing = append(missing, c.Subject+": "+c.String()+" (not checked: "+c.Err+")")
		case !c.Allowed:
			missing = append(missing, c.Subject+": "+c.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	f := &Finding{
		ID: "migration-lease-access", Area: AreaLeaderMigration, Severity: Warning, Objects: missing,
		Title: "kube-controller-manager or the CCM may not use the migration Lease " + CCMNamespace + "/" + LeaseMigration,
		Detail: "Leader migration hands route, service and cloud-node-lifecycle over through this Lease; a component that cannot get " +
			"and update it never holds it and never runs them. Not needed without leader migration (a single control-plane node).",
		Fix: "Step 2 of the procedure below: " + grantPatch("system::leader-locking-kube-controller-manager") +
			" for kube-controller-manager; kubectl apply -f deploy/ccm/rbac.yaml for the CCM.",
	}
	if migrationStarted {
		f.Severity = Blocking
		f.Detail = "The migration Lease exists, so a migration is under way: " + f.Detail
	}
	return f
}

// boolFlag reads a boolean flag as pflag does: "--name" is true,
// "--name=v" is v; set tells whether it is there, ok whether v parses.
func boolFlag(args []string, name string) (value, set, ok bool) {
	for _, a := range args {
		switch {
		case a == "--"+name:
			value, set, ok = true, true, true
		case strings.HasPrefix(a, "--"+name+"="):
			v, err := strconv.ParseBool(strings.TrimPrefix(a, "--"+name+"="))
			value, set, ok = v, true, err == nil
		}
	}
	return value, set, ok
}

// KCMLeaderMigrationFlags reads kube-controller-manager's mirror pods for
// what the procedure needs: leader election on (kube-controller-manager
// silently turns leader migration off without it, so the cloud controllers
// would run in it and in the CCM at once), and no leader migration on an
// external provider (upstream: MUST NOT; it would hold the migration lease
// with none of the migrated controllers to run).
func KCMLeaderMigrationFlags(pods []corev1.Pod) []*Finding {
	var seen int
	var noElect, noElectMigrating, externalMigrating []string
	for i := range pods {
		p := &pods[i]
		if controlPlaneComponent(p) != "kube-controller-manager" {
			continue
		}
		for _, c := range p.Spec.Containers {
			args := append(append([]string{}, c.Command...), c.Args...)
			// Only the kube-controller-manager container: not a sidecar's flags.
			if c.Name != "kube-controller-manager" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, "kube-controller-manager") }) {
				continue
			}
			seen++
			elect, electSet, _ := boolFlag(args, "leader-elect")
			migrating, _, _ := boolFlag(args, "enable-leader-migration")
			provider, _ := flagValue(args, "cloud-provider")
			switch {
			case electSet && !elect && migrating:
				noElectMigrating = append(noElectMigrating, p.Name)
			case electSet && !elect:
				noElect = append(noElect, p.Name)
			}
			if migrating && (provider == "" || provider == "external") {
				externalMigrating = append(externalMigrating, fmt.Sprintf("%s (--cloud-provider=%s --enable-leader-migration)", p.Name, provider))
			}
		}
	}
	var out []*Finding
	if seen == 0 {
		out = append(out, &Finding{
			ID: "kcm-flags-unseen", Area: AreaLeaderMigration, Severity: Info,
			Title: "No kube-controller-manager mirror pod in " + CCMNamespace + ": its --leader-elect and --enable-leader-migration were not checked",
			Fix:   "Check on the control-plane hosts: kube-controller-manager runs with --leader-elect=true, and without --enable-leader-migration once it has --cloud-provider=external.",
		})
	}
	if len(noElectMigrating) > 0 {
		out = append(out, &Finding{
			ID: "kcm-leader-elect-off", Area: AreaLeaderMigration, Severity: Blocking, Objects: noElectMigrating,
			Title:  "kube-controller-manager has --enable-leader-migration but --leader-elect=false: leader migration is off",
			Detail: "kube-controller-manager enables leader migration only under leader election; without it it runs the cloud controllers with no lock, next to the CCM's.",
			Fix:    "Remove --leader-elect=false (its default is true) from these kube-controller-managers.",
		})
	}
	if len(noElect) > 0 {
		out = append(out, &Finding{
			ID: "kcm-leader-elect-off", Area: AreaLeaderMigration, Severity: Warning, Objects: noElect,
			Title:  "kube-controller-manager runs with --leader-elect=false",
			Detail: "Upstream's procedure assumes leader election (--leader-elect=true): leader migration works only under it.",
			Fix:    "Before leader migration, remove --leader-elect=false (its default is true); a single control-plane node needs no leader migration.",
		})
	}
	if len(externalMigrating) > 0 {
		out = append(out, &Finding{
			ID: "kcm-external-leader-migration", Area: AreaLeaderMigration, Severity: Blocking, Objects: externalMigrating,
			Title: "kube-controller-manager with an external cloud provider has leader migration enabled",
			Detail: "Upstream: kube-controller-manager of version N+1 MUST NOT have leader migration enabled. With an external provider it has none of " +
				"the migrated controllers; whenever it holds the migration lease, no component runs service, route and cloud-node-lifecycle.",
			Fix: "Remove --enable-leader-migration and --leader-migration-config from these kube-controller-managers (only version N's, with the in-tree provider, keep them).",
		})
	}
	return out
}

// neededDrivers returns the in-tree plugins the PVs and StorageClasses use.
func neededDrivers(pvs []corev1.PersistentVolume, classes []storagev1.StorageClass) []*inTreePlugin {
	var out []*inTreePlugin
	for i := range inTreePlugins {
		p := &inTreePlugins[i]
		used := slices.ContainsFunc(classes, func(sc storagev1.StorageClass) bool { return sc.Provisioner == p.Provisioner })
		for j := 0; !used && j < len(pvs); j++ {
			used = volumePlugin(&pvs[j]) == p
		}
		if used {
			out = append(out, p)
		}
	}
	return out
}

// CSINodeReadiness: with CSI migration the kubelet on each node mounts
// in-tree volumes through the CSI driver, so every node must have the
// driver registered (its CSINode lists it in spec.drivers); a CSIDriver
// object alone says nothing about the nodes. The kubelet also records the
// migrated plugin in the CSINode's migrated-plugins annotation, which the
// attach/detach controller reads to pick the CSI path for that node.
func CSINodeReadiness(nodes []corev1.Node, csiNodes []storagev1.CSINode, pvs []corev1.PersistentVolume, classes []storagev1.StorageClass) []*Finding {
	byName := map[string]*storagev1.CSINode{}
	for i := range csiNodes {
		byName[csiNodes[i].Name] = &csiNodes[i]
	}
	var out []*Finding
	for _, p := range neededDrivers(pvs, classes) {
		var objs []string
		for _, n := range nodes {
			cn := byName[n.Name]
			switch {
			case cn == nil:
				objs = append(objs, n.Name+" (no CSINode)")
			case !slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == p.Driver }):
				var have []string
				for _, d := range cn.Spec.Drivers {
					have = append(have, d.Name)
				}
				objs = append(objs, fmt.Sprintf("%s (CSINode drivers: [%s])", n.Name, strings.Join(have, ", ")))
			case !slices.Contains(strings.Split(cn.Annotations[corev1.MigratedPluginsAnnotationKey], ","), p.Provisioner):
				objs = append(objs, fmt.Sprintf("%s (%s registered; %s not in annotation %s)", n.Name, p.Driver, p.Provisioner, corev1.MigratedPluginsAnnotationKey))
			}
		}
		if len(objs) == 0 {
			continue
		}
		out = append(out, &Finding{
			ID: "csi-driver-not-on-nodes", Area: AreaStorage, Severity: Blocking, Objects: objs,
			Title: fmt.Sprintf("Nodes where the CSI driver %s is not registered: %s volumes cannot be attached or mounted there", p.Driver, p.Plugin),
			Detail: "The kubelet registers a CSI driver in the node's CSINode (spec.drivers) once the driver's node plugin runs there, and lists the " +
				"migrated in-tree plugins in " + corev1.MigratedPluginsAnnotationKey + "; the CSIDriver object alone does not make a node ready.",
			Fix: fmt.Sprintf("Run the %s node plugin (its DaemonSet) on these nodes and check `kubectl get csinode <node> -o yaml` lists it; "+
				"kubelets of v1.%d+ migrate %s themselves.", p.Driver, p.GA, p.Plugin),
		})
	}
	return out
}
