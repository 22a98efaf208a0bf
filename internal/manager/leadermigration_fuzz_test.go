package manager

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzLeaderMigrationConfig feeds arbitrary files to LoadMigrationConfig
// (--leader-migration-config). Properties:
//   - nothing panics; a rejected file gives an error naming the flag;
//   - an accepted configuration validates, has a known apiVersion and
//     kind, a leader name, unique non-empty controller names with
//     components, and survives a marshal/load round trip unchanged;
//   - SplitForMigration puts every enabled controller in exactly one of
//     own, migrated or unowned.
func FuzzLeaderMigrationConfig(f *testing.F) {
	f.Add([]byte("apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\nleaderName: cloud-provider-extraction-migration\ncontrollerLeaders:\n  - name: route-controller\n    component: \"*\"\n  - name: service-controller\n    component: cloud-controller-manager\n"))
	f.Add([]byte("apiVersion: controllermanager.config.k8s.io/v1beta1\nkind: LeaderMigrationConfiguration\nleaderName: x\nresourceLock: leases\ncontrollerLeaders: [{name: cloud-node-lifecycle-controller, component: kube-controller-manager}]\n"))
	f.Add([]byte(`{"apiVersion":"controllermanager.config.k8s.io/v1alpha1","kind":"LeaderMigrationConfiguration","leaderName":"l","controllerLeaders":[{"name":"a","component":"*"},{"name":"a","component":"*"}]}`))
	f.Add([]byte("apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\nleaderName: x\nextra: 1\n"))
	f.Add([]byte("leaderName: &a x\nkind: *a\n"))
	f.Add([]byte("apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\nleaderName: x\ncontrollerLeaders: null\n"))
	f.Add([]byte(""))
	enabled := DefaultControllers()
	path := filepath.Join(f.TempDir(), "lm.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadMigrationConfig(path)
		if err != nil {
			if msg := err.Error(); len(msg) < len("--leader-migration-config") || msg[:len("--leader-migration-config")] != "--leader-migration-config" {
				t.Fatalf("error %q does not name the flag", msg)
			}
			return
		}
		if err := cfg.validate(); err != nil {
			t.Fatalf("accepted config does not validate: %v", err)
		}
		if !slices.Contains(migrationVersions, cfg.APIVersion) || cfg.Kind != "LeaderMigrationConfiguration" || cfg.LeaderName == "" {
			t.Fatalf("accepted %+v", cfg)
		}
		seen := map[string]bool{}
		for _, l := range cfg.ControllerLeaders {
			if l.Name == "" || l.Component == "" || seen[l.Name] {
				t.Fatalf("accepted leaders %+v", cfg.ControllerLeaders)
			}
			seen[l.Name] = true
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal %+v: %v", cfg, err)
		}
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := LoadMigrationConfig(path)
		if err != nil {
			t.Fatalf("the accepted config does not reload from\n%s: %v", out, err)
		}
		if len(again.ControllerLeaders) == 0 && len(cfg.ControllerLeaders) == 0 {
			again.ControllerLeaders = cfg.ControllerLeaders // nil and [] are the same list
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip changed %+v to %+v", cfg, again)
		}
		own, migrated, unowned := SplitForMigration(enabled, cfg)
		if len(own)+len(migrated)+len(unowned) != len(enabled) {
			t.Fatalf("split %d+%d+%d of %d controllers", len(own), len(migrated), len(unowned), len(enabled))
		}
		names := map[string]int{}
		for _, c := range own {
			names[c.Name]++
		}
		for _, c := range migrated {
			names[c.Name]++
		}
		for _, n := range unowned {
			names[n]++
		}
		for _, c := range enabled {
			if names[c.Name] != 1 {
				t.Fatalf("controller %s is in %d of own/migrated/unowned", c.Name, names[c.Name])
			}
		}
	})
}
