package devenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testClaimName is unique on the host: claims are host-wide, and other
// packages' tests run at once.
func testClaimName(t *testing.T) string {
	return fmt.Sprintf("test/%d/%s", os.Getpid(), t.Name())
}

// TestClaim: a claim is exclusive while held, tells who holds it, and is
// free again once released.
func TestClaim(t *testing.T) {
	name := testClaimName(t)
	c, held, err := tryClaim(name, "/data/a")
	if err != nil || held {
		t.Fatalf("first claim: held %v, %v", held, err)
	}
	if c2, held, err := tryClaim(name, "/data/b"); err != nil || !held || c2 != nil {
		t.Fatalf("second claim while held: %v, held %v, %v", c2, held, err)
	}
	if got := claimHolder(name); got != "/data/a" {
		t.Errorf("holder %q, want /data/a", got)
	}
	err = heldError("loopback slot 7", name, "/data/b")
	if err == nil || !strings.Contains(err.Error(), "data directory /data/a") || !strings.Contains(err.Error(), "--data-dir /data/b") {
		t.Errorf("held error %v: want the holder's and this data directory", err)
	}
	c.release()
	if got := claimHolder(name); got != "" {
		t.Errorf("holder after release %q", got)
	}
	c3, held, err := tryClaim(name, "/data/b")
	if err != nil || held {
		t.Fatalf("claim after release: held %v, %v", held, err)
	}
	c3.release()
	if err := heldError("x", name, "/d"); !strings.Contains(err.Error(), "another running environment") {
		t.Errorf("held error with nobody answering: %v", err)
	}
}

// TestLoadNetworkClaimsItsSlot: two environments made at once get
// different slots (the second sees the first's claim although neither has
// a socket yet), and an environment whose kept slot another one holds
// gets an error naming that one, not the same addresses.
func TestLoadNetworkClaimsItsSlot(t *testing.T) {
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	a, ca, err := loadNetwork(pa, "/data/a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ca.release() }()
	for range 20 {
		b, cb, err := loadNetwork(pb, "/data/b")
		if err != nil {
			t.Fatal(err)
		}
		cb.release()
		if b.VIPPool == a.VIPPool || b.NodePool == a.NodePool {
			t.Fatalf("b got a's slot: %+v and %+v", b, a)
		}
		_ = os.Remove(pb)
	}
	// b's kept plan names a's slot (as when a was made while b was
	// stopped): b must not start on it.
	data, _ := os.ReadFile(pa)
	if err := os.WriteFile(pb, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, c, err := loadNetwork(pb, "/data/b"); err == nil || !strings.Contains(err.Error(), "/data/a") {
		c.release()
		t.Fatalf("b on a's kept slot: %v; want an error naming /data/a", err)
	}
	ca.release()
	b, cb, err := loadNetwork(pb, "/data/b")
	if err != nil || b != a {
		t.Fatalf("b on the slot once a released it: %+v, %v", b, err)
	}
	cb.release()
}

// TestRealNetworkClaims: a new real network plan claims its VPC slot and
// its pod and Service ranges under the names a kept plan is claimed by, so
// a second environment can neither choose them nor start on a copy.
func TestRealNetworkClaims(t *testing.T) {
	la, lb := layout{dir: t.TempDir()}, layout{dir: t.TempDir()}
	a, claims, err := loadRealNetwork(la)
	if err != nil {
		t.Fatal(err)
	}
	release := func() {
		for _, c := range claims {
			c.release()
		}
		claims = nil
	}
	defer release()
	if len(claims) != 3 {
		t.Fatalf("%d claims, want 3 (VPC, pods, Services)", len(claims))
	}
	b, cb, err := loadRealNetwork(lb)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cb {
		c.release()
	}
	if b.Block == a.Block || b.Pods == a.Pods || b.Services == a.Services {
		t.Errorf("b shares a range with a: %+v, %+v", b, a)
	}
	data, _ := os.ReadFile(la.realNetworkFile())
	if err := os.WriteFile(lb.realNetworkFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, cb, err := loadRealNetwork(lb); err == nil || !strings.Contains(err.Error(), la.dir) || !strings.Contains(err.Error(), a.Block.String()) {
		for _, c := range cb {
			c.release()
		}
		t.Fatalf("b on a's kept plan: %v; want an error naming a's VPC and data directory", err)
	}
	release()
	b, cb, err = loadRealNetwork(lb)
	if err != nil || b.Block != a.Block {
		t.Fatalf("b on a's plan once released: %+v, %v", b, err)
	}
	for _, c := range cb {
		c.release()
	}
}
