package manager

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSplitForMigrationMatchesUpstreamNames(t *testing.T) {
	// What --controllers=* enables, as the CCM splits it (run.go).
	star, err := EnabledControllers([]string{"*"}, DefaultControllers())
	if err != nil {
		t.Fatal(err)
	}
	own, migrated, unowned := SplitForMigration(star, DefaultMigrationConfig())
	// Upstream's default config names route-controller and service-controller
	// (KCM-era names) and cloud-node-lifecycle-controller, all with "*".
	if got := controllerNames(migrated); !slices.Equal(got, []string{"cloud-node-lifecycle-controller", "service-lb-controller", "node-route-controller"}) {
		t.Errorf("migrated = %v", got)
	}
	if got := controllerNames(own); !slices.Contains(got, "cloud-node-controller") || slices.Contains(got, "service-lb-controller") {
		t.Errorf("own = %v", got)
	}
	if len(unowned) != 0 {
		t.Errorf("unowned = %v", unowned)
	}
	cfg := DefaultMigrationConfig()
	cfg.ControllerLeaders = []ControllerLeader{{Name: "service", Component: "kube-controller-manager"}, {Name: "cloud-node-controller", Component: "cloud-controller-manager"}}
	own, migrated, unowned = SplitForMigration(star, cfg)
	if !slices.Equal(unowned, []string{"service-lb-controller"}) || !slices.Equal(controllerNames(migrated), []string{"cloud-node-controller"}) || len(own) != 3 {
		t.Errorf("own %v migrated %v unowned %v", controllerNames(own), controllerNames(migrated), unowned)
	}
}

func TestLoadMigrationConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "lm.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(`apiVersion: controllermanager.config.k8s.io/v1
kind: LeaderMigrationConfiguration
leaderName: cloud-provider-extraction-migration
controllerLeaders:
  - name: route-controller
    component: "*"
  - name: service-controller
    component: cloud-controller-manager
`)
	cfg, err := LoadMigrationConfig(good)
	if err != nil || cfg.LeaderName != "cloud-provider-extraction-migration" || len(cfg.ControllerLeaders) != 2 {
		t.Fatalf("%+v %v", cfg, err)
	}
	for body, want := range map[string]string{
		"apiVersion: v1\nkind: ConfigMap\nleaderName: x\n": "want kind LeaderMigrationConfiguration",
		"apiVersion: controllermanager.config.k8s.io/v1beta1\nkind: LeaderMigrationConfiguration\nresourceLock: endpoints\nleaderName: x\n": "resourceLock \"endpoints\" is not supported",
		"apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\ncontrollerLeaders: [{name: a}]\n":              "controllerLeaders[0].component is empty",
		"apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\nleaderName: x\nextra: 1\n":                     "unknown field",
	} {
		if _, err := LoadMigrationConfig(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
	o := NewOptions()
	o.CloudProvider, o.LeaderMigrationConfig = "local", good
	if err := o.Validate(DefaultControllers()); err == nil || !strings.Contains(err.Error(), "needs --enable-leader-migration") {
		t.Errorf("config without enable: %v", err)
	}
}
