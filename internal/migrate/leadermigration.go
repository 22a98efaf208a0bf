package migrate

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/manager"
)

// LeaderMigrationFiles are the LeaderMigrationConfiguration files of a
// migration: KCM for the first step (the current kube-controller-managers,
// which still run the cloud controllers), CCM for the second (the upgraded
// kube-controller-managers and the new cloud-controller-managers, which take
// them over).
type LeaderMigrationFiles struct {
	KCM manager.MigrationConfig `json:"kcm"`
	CCM manager.MigrationConfig `json:"ccm"`
}

// migratedControllers are the controllers handed over, by the names both
// kube-controller-manager (before v1.31) and the CCM accept.
var migratedControllers = []string{"cloud-node-lifecycle", "route", "service"}

func migrationConfig(component string) manager.MigrationConfig {
	c := manager.MigrationConfig{
		APIVersion: "controllermanager.config.k8s.io/v1", Kind: "LeaderMigrationConfiguration",
		LeaderName: LeaseMigration,
	}
	for _, n := range migratedControllers {
		c.ControllerLeaders = append(c.ControllerLeaders, manager.ControllerLeader{Name: n, Component: component})
	}
	return c
}

// LeaderMigrationConfigs returns the configuration of each step.
func LeaderMigrationConfigs() LeaderMigrationFiles {
	return LeaderMigrationFiles{KCM: migrationConfig("kube-controller-manager"), CCM: migrationConfig(manager.ComponentName)}
}

// LeaderMigrationFinding explains the two files (info).
func LeaderMigrationFinding() *Finding {
	return &Finding{
		ID: "leader-migration-config", Area: AreaLeaderMigration, Severity: Info,
		Title: "Leader migration configuration for an HA control plane (printed below; --write-leader-migration-config writes kcm.yaml and ccm.yaml)",
		Detail: "Both components compete for the " + LeaseMigration + " lease for cloud-node-lifecycle, route and service, so the " +
			"controllers never run twice during a rolling control-plane upgrade.",
		// The steps themselves are the plan (plan.go), printed in full.
		Fix: "Follow upstream's procedure printed below, in order: kcm.yaml goes to kube-controller-manager of version N only, " +
			"ccm.yaml to the cloud-controller-manager only; kube-controller-manager of version N+1 (--cloud-provider=external) " +
			"runs without --enable-leader-migration.",
	}
}

// marshalConfig returns a file's YAML.
func marshalConfig(c manager.MigrationConfig) ([]byte, error) { return yaml.Marshal(c) }

// YAML returns the two files' contents.
func (f LeaderMigrationFiles) YAML() (kcm, ccm []byte, err error) {
	if kcm, err = marshalConfig(f.KCM); err != nil {
		return nil, nil, err
	}
	ccm, err = marshalConfig(f.CCM)
	return kcm, ccm, err
}

// Write writes kcm.yaml and ccm.yaml into dir (created if missing) and
// returns their paths.
func (f LeaderMigrationFiles) Write(dir string) ([]string, error) {
	kcm, ccm, err := f.YAML()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, file := range []struct {
		name string
		data []byte
	}{{"kcm.yaml", kcm}, {"ccm.yaml", ccm}} {
		p := filepath.Join(dir, file.name)
		if err := os.WriteFile(p, file.data, 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
