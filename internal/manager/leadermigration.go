package manager

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Leader migration (upstream's LeaderMigrationConfiguration) hands the
// cloud controllers over from kube-controller-manager to a CCM without two
// of them ever running at once: both hold their own lease for the other
// controllers and compete for a shared migration lease for the migrated
// ones.

// ComponentName is this component in a LeaderMigrationConfiguration.
const ComponentName = "cloud-controller-manager"

// MigrationConfig is a LeaderMigrationConfiguration
// (controllermanager.config.k8s.io/v1, v1beta1 or v1alpha1).
type MigrationConfig struct {
	APIVersion        string             `json:"apiVersion"`
	Kind              string             `json:"kind"`
	LeaderName        string             `json:"leaderName"`
	ResourceLock      string             `json:"resourceLock,omitempty"`
	ControllerLeaders []ControllerLeader `json:"controllerLeaders"`
}

// ControllerLeader assigns a controller to a component ("*": whichever holds
// the migration lease).
type ControllerLeader struct {
	Name      string `json:"name"`
	Component string `json:"component"`
}

// DefaultMigrationConfig is upstream's default, used when
// --enable-leader-migration is given without --leader-migration-config.
func DefaultMigrationConfig() MigrationConfig {
	return MigrationConfig{
		APIVersion: "controllermanager.config.k8s.io/v1", Kind: "LeaderMigrationConfiguration",
		LeaderName: "cloud-provider-extraction-migration", ResourceLock: "leases",
		ControllerLeaders: []ControllerLeader{
			{Name: "route-controller", Component: "*"},
			{Name: "service-controller", Component: "*"},
			{Name: "cloud-node-lifecycle-controller", Component: "*"},
		},
	}
}

var migrationVersions = []string{"controllermanager.config.k8s.io/v1", "controllermanager.config.k8s.io/v1beta1", "controllermanager.config.k8s.io/v1alpha1"}

// LoadMigrationConfig reads and checks a LeaderMigrationConfiguration file.
func LoadMigrationConfig(path string) (MigrationConfig, error) {
	var c MigrationConfig
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("--leader-migration-config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return c, fmt.Errorf("--leader-migration-config %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("--leader-migration-config %s: %w", path, err)
	}
	return c, nil
}

func (c MigrationConfig) validate() error {
	var errs []string
	if !slices.Contains(migrationVersions, c.APIVersion) || c.Kind != "LeaderMigrationConfiguration" {
		errs = append(errs, fmt.Sprintf("want kind LeaderMigrationConfiguration of apiVersion %s, got %q %q", strings.Join(migrationVersions, ", "), c.Kind, c.APIVersion))
	}
	if c.LeaderName == "" {
		errs = append(errs, "leaderName is required (the migration lease's name)")
	}
	// v1 has no resourceLock (always leases); the older versions must say leases.
	if c.ResourceLock != "" && c.ResourceLock != "leases" {
		errs = append(errs, fmt.Sprintf("resourceLock %q is not supported: use leases", c.ResourceLock))
	}
	seen := map[string]bool{}
	for i, l := range c.ControllerLeaders {
		switch {
		case l.Name == "":
			errs = append(errs, fmt.Sprintf("controllerLeaders[%d].name is empty", i))
		case seen[l.Name]:
			errs = append(errs, fmt.Sprintf("controllerLeaders[%d]: %s is listed twice", i, l.Name))
		case l.Component == "":
			errs = append(errs, fmt.Sprintf("controllerLeaders[%d].component is empty: use kube-controller-manager, cloud-controller-manager or *", i))
		}
		seen[l.Name] = true
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// migrationNames are the names upstream's configurations use for Portside's
// controllers: upstream's default names the KCM-era controllers
// (route-controller, service-controller), which are not the CCM's current
// names, so they are matched too.
var migrationNames = map[string][]string{
	"node-route-controller": {"route-controller"},
	"service-lb-controller": {"service-controller"},
}

// SplitForMigration sorts the enabled controllers: those run under this
// CCM's own lease, those run under the migration lease, and those the
// configuration gives to another component (not run here).
func SplitForMigration(enabled []Controller, cfg MigrationConfig) (own, migrated []Controller, unowned []string) {
	for _, c := range enabled {
		names := append(append([]string{c.Name}, c.Aliases...), migrationNames[c.Name]...)
		idx := slices.IndexFunc(cfg.ControllerLeaders, func(l ControllerLeader) bool { return slices.Contains(names, l.Name) })
		switch {
		case idx < 0:
			own = append(own, c)
		case cfg.ControllerLeaders[idx].Component == "*" || cfg.ControllerLeaders[idx].Component == ComponentName:
			migrated = append(migrated, c)
		default:
			unowned = append(unowned, c.Name)
		}
	}
	return own, migrated, unowned
}
