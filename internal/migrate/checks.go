package migrate

import (
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Snapshot is what Collect read from the cluster: the input of the pure
// decision functions.
type Snapshot struct {
	Server        string
	ServerVersion string
	// Minor is the server's minor version (0 when unknown).
	Minor int

	Nodes          []corev1.Node
	KubeSystemPods []corev1.Pod
	Kubelets       []KubeletProbe
	PVs            []corev1.PersistentVolume
	StorageClasses []storagev1.StorageClass
	CSIDrivers     []storagev1.CSIDriver
	CSINodes       []storagev1.CSINode
	Services       []corev1.Service
	// ServiceAccount tells whether kube-system/cloud-controller-manager exists.
	ServiceAccount bool
	Access         []AccessCheck
	// MigrationAccess: kube-controller-manager's and the CCM's access to
	// the migration Lease.
	MigrationAccess []SubjectAccess
	// Leases by name in kube-system; absent names were not found.
	Leases map[string]*coordinationv1.Lease
	// Errors are the reads that failed, by what was read ("nodes": "forbidden").
	Errors map[string]string
	Now    time.Time
}

// Evaluate runs every decision function over s.
func Evaluate(s *Snapshot) *Report {
	r := &Report{Server: s.Server, ServerVersion: s.ServerVersion, CheckedAt: s.Now}
	add := func(fs ...*Finding) {
		for _, f := range fs {
			if f != nil {
				r.Findings = append(r.Findings, *f)
			}
		}
	}
	active := ActiveCCM(s.Leases, s.Now)
	add(ReadErrors(s.Errors)...)
	add(NodesWithoutProviderID(s.Nodes), NodesWithBetaLabelsOnly(s.Nodes), NodesUninitialized(s.Nodes, active))
	add(ControlPlaneFlags(s.KubeSystemPods)...)
	add(KubeletCloudProviders(s.Kubelets)...)
	add(InTreeVolumes(s.PVs, s.CSIDrivers, s.Minor)...)
	add(InTreeStorageClasses(s.StorageClasses, s.CSIDrivers, s.Minor)...)
	add(CSINodeReadiness(s.Nodes, s.CSINodes, s.PVs, s.StorageClasses)...)
	add(LoadBalancerCleanupWithoutController(s.Services, active), LoadBalancerProviderAnnotations(s.Services))
	add(CCMAccess(s.ServiceAccount, s.Access))
	add(CCMLeases(s.Leases, s.Now)...)
	r.LeaderMigration = LeaderMigrationConfigs()
	r.LeaderMigrationPlan = LeaderMigrationPlan()
	add(LeaderMigrationFinding())
	add(MigrationLeaseAccess(s.MigrationAccess, s.Leases[LeaseMigration] != nil))
	add(KCMLeaderMigrationFlags(s.KubeSystemPods)...)
	r.finish()
	return r
}

// ReadErrors: reads that failed leave checks undone, so the cluster cannot
// be called ready.
func ReadErrors(errs map[string]string) []*Finding {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []*Finding
	for _, k := range keys {
		out = append(out, &Finding{
			ID: "read-failed", Area: AreaAccess, Severity: Blocking,
			Title:  "Could not read " + k + ": its checks were not run",
			Detail: errs[k],
			Fix:    "Run the check with credentials that can list/get " + k + " (cluster-admin or a read-only role covering it).",
		})
	}
	return out
}
