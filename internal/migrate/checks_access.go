package migrate

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// CCMServiceAccount is the external CCM's ServiceAccount (deploy/ccm).
const (
	CCMNamespace      = "kube-system"
	CCMServiceAccount = "cloud-controller-manager"
)

// AccessCheck is one verb the CCM needs, and whether its ServiceAccount may.
type AccessCheck struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
	Allowed                                             bool
	// Err is set when the SubjectAccessReview itself failed.
	Err string
}

// String is e.g. "patch nodes/status" or "update leases kube-system/cloud-controller-manager".
func (a AccessCheck) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	s := a.Verb + " " + r
	switch {
	case a.Namespace != "" && a.Name != "":
		s += " " + a.Namespace + "/" + a.Name
	case a.Namespace != "":
		s += " in " + a.Namespace
	}
	return s
}

// CCMAccessChecks are the key verbs of deploy/ccm/rbac.yaml, checked by
// SubjectAccessReview as the CCM's ServiceAccount.
func CCMAccessChecks() []AccessCheck {
	return []AccessCheck{
		{Verb: "list", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes", Subresource: "status"},
		{Verb: "list", Resource: "services"},
		{Verb: "patch", Resource: "services", Subresource: "status"},
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace, Name: "cloud-controller-manager"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace, Name: "cloud-controller-manager"},
	}
}

// CCMAccess: the CCM's ServiceAccount must exist and be allowed every key verb.
func CCMAccess(saExists bool, checks []AccessCheck) *Finding {
	var missing []string
	if !saExists {
		missing = append(missing, "ServiceAccount "+CCMNamespace+"/"+CCMServiceAccount+" does not exist")
	}
	for _, c := range checks {
		switch {
		case c.Err != "":
			missing = append(missing, c.String()+" (not checked: "+c.Err+")")
		case !c.Allowed:
			missing = append(missing, c.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &Finding{
		ID: "ccm-rbac-missing", Area: AreaCCM, Severity: Blocking,
		Title:   "The CCM's ServiceAccount " + CCMNamespace + "/" + CCMServiceAccount + " lacks what it needs",
		Objects: missing,
		Fix:     "kubectl apply -f deploy/ccm/serviceaccount.yaml -f deploy/ccm/rbac.yaml (least-privilege ClusterRole, bindings and the leader-election Role).",
	}
}

// Lease names in kube-system.
const (
	LeaseKCM       = "kube-controller-manager"
	LeaseCCM       = "cloud-controller-manager"
	LeaseMigration = "cloud-provider-extraction-migration"
)

// fresh tells whether a lease's holder renewed it recently (twice its
// duration, at least 30s).
func fresh(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		return false
	}
	d := 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return now.Sub(l.Spec.RenewTime.Time) <= max(2*d, 30*time.Second)
}

// ActiveCCM returns the holder of a fresh CCM or migration lease, "" when no
// cloud controllers run under leader election.
func ActiveCCM(leases map[string]*coordinationv1.Lease, now time.Time) string {
	for _, name := range []string{LeaseCCM, LeaseMigration} {
		if l := leases[name]; fresh(l, now) {
			return *l.Spec.HolderIdentity
		}
	}
	return ""
}

func describeLease(l *coordinationv1.Lease, now time.Time) string {
	holder := "no holder"
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		holder = "held by " + *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		holder += fmt.Sprintf(", renewed %v ago", now.Sub(l.Spec.RenewTime.Time).Round(time.Second))
	}
	if !fresh(l, now) {
		holder += " (stale)"
	}
	return CCMNamespace + "/" + l.Name + ": " + holder
}

// CCMLeases reports the controller managers' leases (info).
func CCMLeases(leases map[string]*coordinationv1.Lease, now time.Time) []*Finding {
	var out []*Finding
	if l := leases[LeaseCCM]; l != nil {
		out = append(out, &Finding{ID: "ccm-lease", Area: AreaCCM, Severity: Info,
			Title: "A cloud controller manager has run with leader election", Objects: []string{describeLease(l, now)}})
	} else {
		out = append(out, &Finding{ID: "ccm-lease", Area: AreaCCM, Severity: Info,
			Title: "No Lease " + CCMNamespace + "/" + LeaseCCM + ": no cloud controller manager has run with leader election",
			Fix:   "Expected before the migration; after deploying the CCM (deploy/ccm/deployment.yaml) the lease appears with its holder."})
	}
	if l := leases[LeaseKCM]; l != nil {
		out = append(out, &Finding{ID: "kcm-lease", Area: AreaLeaderMigration, Severity: Info,
			Title: "kube-controller-manager's lease", Objects: []string{describeLease(l, now)}})
	}
	if l := leases[LeaseMigration]; l != nil {
		out = append(out, &Finding{ID: "migration-lease", Area: AreaLeaderMigration, Severity: Info,
			Title:   "Leader migration has started: the migration lease exists",
			Objects: []string{describeLease(l, now)},
			Fix:     "Finish the migration: once every kube-controller-manager runs without the cloud controllers, drop --enable-leader-migration from both components."})
	}
	return out
}
