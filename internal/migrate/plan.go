package migrate

import (
	"fmt"
	"io"
	"strings"
)

// The leader-migration procedure, as upstream's task "Migrate Replicated
// Control Plane To Use Cloud Controller Manager" (kubernetes.io,
// tasks/administer-cluster/controller-manager-leader-migration) gives it, in
// its order. It is printed rather than summarised because the details are
// what keeps the hand-over safe: the kube-controller-manager of version N+1
// runs with an external cloud provider and so has none of the migrated
// controllers; given --enable-leader-migration it would compete for the
// migration lease and, while holding it, run none of them, so no component
// would run the service, route and cloud-node-lifecycle controllers.

// LeaderMigrationFile is where upstream's procedure puts the configuration
// on every control-plane node, mounted at the same path in the container.
const LeaderMigrationFile = "/etc/leadermigration.conf"

// PlanStep is one step of the procedure.
type PlanStep struct {
	Title string `json:"title"`
	// Actions are done in order.
	Actions []string `json:"actions"`
	// Files are the files of --write-leader-migration-config the step needs.
	Files []string `json:"files,omitempty"`
}

// grantPatch is upstream's grant of the migration lease to a component's
// leader-locking Role. Upstream patches with --type=merge, which replaces
// the Role's whole rules list; a JSON patch appending the rule grants the
// same and keeps the Role's other rules.
func grantPatch(role string) string {
	return fmt.Sprintf(`kubectl patch -n %s role '%s' --type=json -p '[{"op":"add","path":"/rules/-","value":{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"resourceNames":["%s"],"verbs":["create","list","get","update"]}}]'`,
		CCMNamespace, role, LeaseMigration)
}

// LeaderMigrationPlan returns upstream's procedure for moving route,
// service and cloud-node-lifecycle from kube-controller-manager (version N,
// in-tree provider) to the CCM (with kube-controller-manager N+1).
func LeaderMigrationPlan() []PlanStep {
	flags := "--enable-leader-migration --leader-migration-config=" + LeaderMigrationFile
	return []PlanStep{
		{
			Title: "Before you begin",
			Actions: []string{
				"Every kube-controller-manager of version N runs with leader election, --leader-elect=true (its default), and still with its in-tree --cloud-provider; no cloud-controller-manager is deployed yet.",
				"Version N is a kube-controller-manager that still runs route, service and cloud-node-lifecycle with its in-tree provider: v1.30 or older (v1.31 removed the in-tree providers). A newer one is version N+1 for this procedure whatever its version: it runs none of the three, and given leader migration it holds the migration lease for nothing (v1.37 exits right after taking it, with `informer name \"kube-controller-manager\" is already registered`, an upstream bug, and leaves the lease to expire); the finding kcm-external-leader-migration reports such a kube-controller-manager.",
				"The CCM is built with leader migration (Portside's is). For a single control-plane node, or if controller managers may be down during the upgrade, leader migration is not needed and this procedure can be skipped.",
			},
		},
		{
			Title: "Grant access to the migration lease",
			Actions: []string{
				"Both components need get and update (and create) on Lease " + CCMNamespace + "/" + LeaseMigration + ". Upstream's default roles may allow only each component's own lease; this check asks the apiserver for both (finding migration-lease-access) and the grants below are needed only for what it reports missing.",
				"kube-controller-manager: " + grantPatch("system::leader-locking-kube-controller-manager"),
				"cloud-controller-manager: Portside's deploy/ccm/rbac.yaml grants it (its leader-election Role names the migration lease); with upstream's Role instead: " + grantPatch("system::leader-locking-cloud-controller-manager"),
			},
		},
		{
			Title: "Initial leader migration configuration (kube-controller-manager of version N)",
			Files: []string{"kcm.yaml"},
			Actions: []string{
				"kcm.yaml assigns route, service and cloud-node-lifecycle to kube-controller-manager, which runs them today with the in-tree provider.",
				"On each control-plane node save kcm.yaml as " + LeaderMigrationFile + " and mount it at the same path in the kube-controller-manager container (its static-pod manifest).",
				"Add " + flags + " to kube-controller-manager's arguments, and restart kube-controller-manager on each node. It is now ready for the migration.",
			},
		},
		{
			Title: "Deploy the cloud-controller-manager (control-plane nodes of version N+1)",
			Files: []string{"ccm.yaml"},
			Actions: []string{
				"ccm.yaml assigns the same three controllers to cloud-controller-manager: only the component changes.",
				"On each control-plane node of version N+1 deploy ccm.yaml as " + LeaderMigrationFile + ", mount it in the cloud-controller-manager container in the same manner, and add " + flags + " (and --leader-elect=true, the CCM's default) to its arguments.",
				"Create the new control-plane node with that cloud-controller-manager and with kube-controller-manager --cloud-provider=external. kube-controller-manager of version N+1 MUST NOT have leader migration enabled (no --enable-leader-migration, no --leader-migration-config): with an external cloud provider it does not run the migrated controllers, so it takes no part in the migration (holding the migration lease, it would run none of them).",
				"The CCM's other controllers (cloud-node, which initializes Nodes) and its webhooks (--webhooks) are not in the configuration: they run in the CCM from the start, under its own lease " + CCMNamespace + "/" + LeaseCCM + " (webhooks on every replica).",
			},
		},
		{
			Title: "Upgrade the control plane",
			Actions: []string{
				"The control plane now has nodes of version N (kube-controller-manager only) and N+1 (kube-controller-manager and cloud-controller-manager). Each migrated controller runs under kube-controller-manager N or cloud-controller-manager N+1, whichever holds the migration lease, never under both.",
				"In a rolling manner, create a new control-plane node of version N+1 and bring down one of version N, until only nodes of version N+1 are left.",
			},
		},
		{
			Title: "Rollback (only if needed)",
			Files: []string{"kcm.yaml"},
			Actions: []string{
				"Add nodes of version N, whose kube-controller-manager has leader migration enabled with kcm.yaml as above, back to the control plane, replacing one node of version N+1 each time, until only nodes of version N are left.",
			},
		},
		{
			Title: "(Optional) Disable leader migration",
			Actions: []string{
				"Once every control-plane node runs kube-controller-manager and cloud-controller-manager of version N+1, leader migration has done its job; disabling it saves one Lease, and re-enabling it later for a rollback is safe.",
				"In a rolling manner, remove --enable-leader-migration and --leader-migration-config from the cloud-controller-manager manifest, remove the mount of " + LeaderMigrationFile + ", and then the file itself. To re-enable it, recreate the file, its mount and the flags.",
			},
		},
		{
			Title: "Default configuration (instead of the files)",
			Actions: []string{
				"--enable-leader-migration without --leader-migration-config uses upstream's default configuration (the same three controllers, component \"*\": whichever component holds the migration lease). It fits both kube-controller-manager N and the CCM when no flag enables another in-tree provider or changes which component owns a controller.",
			},
		},
	}
}

// printPlan writes the procedure as numbered steps.
func printPlan(w io.Writer, steps []PlanStep) {
	fmt.Fprintf(w, "\n== Leader migration procedure (upstream's, in order) ==\n")
	for i, s := range steps {
		fmt.Fprintf(w, "%d. %s", i+1, s.Title)
		if len(s.Files) > 0 {
			fmt.Fprintf(w, " [needs %s]", strings.Join(s.Files, ", "))
		}
		fmt.Fprintln(w)
		for _, a := range s.Actions {
			fmt.Fprintf(w, "   - %s\n", a)
		}
	}
}
