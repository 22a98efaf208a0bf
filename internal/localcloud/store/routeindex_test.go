package store

import (
	"net/netip"
	"path/filepath"
	"testing"
)

func TestOverlappingRoute(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	P := netip.MustParsePrefix
	err = s.Update(func(tx *Tx) error {
		for name, cidr := range map[string]string{"a": "10.244.1.0/24", "b": "10.244.8.0/22", "c": "fd00:244::/64", "other": "10.244.2.0/24"} {
			cluster := "c1"
			if name == "other" {
				cluster = "c2"
			}
			if err := tx.IndexRoute(cluster, P(cidr), name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"10.244.1.0/24":     "a", // equal
		"10.244.1.128/25":   "a", // inside a
		"10.244.0.0/16":     "a", // contains a (and b)
		"10.244.9.0/24":     "b", // inside b
		"10.244.2.0/24":     "",  // only another cluster's
		"10.244.12.0/24":    "",  // just after b
		"10.244.7.0/24":     "",  // just before b
		"fd00:244::/48":     "c", // contains c
		"fd00:244:0:1::/64": "",  // next to c
		"0.0.0.0/0":         "a",
	}
	_ = s.View(func(tx *Tx) error {
		for cidr, want := range cases {
			got, _, ok := tx.OverlappingRoute("c1", P(cidr))
			if got != want || ok != (want != "") {
				t.Errorf("%s overlaps %q (%v), want %q", cidr, got, ok, want)
			}
		}
		return nil
	})
	_ = s.Update(func(tx *Tx) error { return tx.UnindexRoute("c1", P("10.244.1.0/24")) })
	_ = s.View(func(tx *Tx) error {
		if got, _, ok := tx.OverlappingRoute("c1", P("10.244.1.0/24")); ok {
			t.Errorf("after unindex still overlaps %q", got)
		}
		return nil
	})
}
