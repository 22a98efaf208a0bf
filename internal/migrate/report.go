// Package migrate checks a cluster's readiness to move from an in-tree cloud
// provider to an external cloud controller manager (`portside migrate
// check`). Collect reads the cluster into a Snapshot; Evaluate turns a
// Snapshot into a Report through pure decision functions, one per finding,
// each over plain Kubernetes objects.
package migrate

import (
	"sort"
	"time"
)

// Severity ranks a finding: blocking findings make the cluster NOT READY.
type Severity string

// Severities, from the most to the least serious.
const (
	Blocking Severity = "blocking"
	Warning  Severity = "warning"
	Info     Severity = "info"
)

func (s Severity) rank() int {
	switch s {
	case Blocking:
		return 0
	case Warning:
		return 1
	}
	return 2
}

// Areas group findings in the report, in this order.
const (
	AreaNodes           = "Nodes"
	AreaControlPlane    = "Control plane"
	AreaKubelets        = "Kubelets"
	AreaStorage         = "Storage"
	AreaLoadBalancers   = "Load balancers"
	AreaCCM             = "CCM RBAC and leases"
	AreaLeaderMigration = "Leader migration"
	AreaAccess          = "Cluster access"
)

// Areas lists the areas in report order.
var Areas = []string{AreaAccess, AreaNodes, AreaControlPlane, AreaKubelets, AreaStorage, AreaLoadBalancers, AreaCCM, AreaLeaderMigration}

// Finding is one thing found, the objects concerned and how to fix it.
type Finding struct {
	// ID names the check, stable for scripts (e.g. node-without-provider-id).
	ID       string   `json:"id"`
	Area     string   `json:"area"`
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`
	// Objects are the objects concerned (all of them; text output shortens).
	Objects []string `json:"objects,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	Fix     string   `json:"fix,omitempty"`
}

// Report is the readiness report.
type Report struct {
	Server        string    `json:"server"`
	ServerVersion string    `json:"serverVersion"`
	Ready         bool      `json:"ready"`
	Blocking      int       `json:"blocking"`
	Warnings      int       `json:"warnings"`
	Findings      []Finding `json:"findings"`
	// LeaderMigration holds the LeaderMigrationConfiguration files for both
	// components.
	LeaderMigration LeaderMigrationFiles `json:"leaderMigration"`
	// LeaderMigrationPlan is upstream's procedure that uses them, in order.
	LeaderMigrationPlan []PlanStep `json:"leaderMigrationPlan"`
	CheckedAt           time.Time  `json:"checkedAt"`
}

// finish sorts the findings by area then severity and computes readiness.
func (r *Report) finish() {
	areaRank := map[string]int{}
	for i, a := range Areas {
		areaRank[a] = i
	}
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if areaRank[a.Area] != areaRank[b.Area] {
			return areaRank[a.Area] < areaRank[b.Area]
		}
		return a.Severity.rank() < b.Severity.rank()
	})
	r.Blocking, r.Warnings = 0, 0
	for _, f := range r.Findings {
		switch f.Severity {
		case Blocking:
			r.Blocking++
		case Warning:
			r.Warnings++
		}
	}
	r.Ready = r.Blocking == 0
}
