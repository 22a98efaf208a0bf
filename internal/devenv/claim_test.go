package devenv

import (
	"fmt"
	"net/netip"
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

// TestMain gives this package's claims a prefix of their own: a test must
// never hold a name a running environment (another package's test, make
// demo) needs, nor be refused one such an environment holds.
func TestMain(m *testing.M) {
	claimPrefix = fmt.Sprintf("portside-test/%d/", os.Getpid())
	os.Exit(m.Run())
}

// TestLoadNetworkClaimsItsSlot: two environments made at once, searching
// from the same slot, get different slots (the second sees the first's
// claim although neither has a socket yet); a slot claimed by another is
// skipped; an environment whose kept slot another one holds gets an error
// naming that one, not the same addresses.
func TestLoadNetworkClaimsItsSlot(t *testing.T) {
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	a, ca, err := loadNetworkFrom(pa, "/data/a", 17)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { releaseAll(ca) }()
	slotA, _ := slotOf(a.VIPPool.Addr())
	b, cb, err := loadNetworkFrom(pb, "/data/b", slotA)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(cb)
	if b.VIPPool == a.VIPPool || b.NodePool == a.NodePool {
		t.Fatalf("b, searching from a's slot, got it: %+v and %+v", b, a)
	}
	_ = os.Remove(pb)
	// b's kept plan names a's slot (as when a was made while b was
	// stopped): b must not start on it.
	data, _ := os.ReadFile(pa)
	if err := os.WriteFile(pb, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, c, err := loadNetwork(pb, "/data/b"); err == nil || !strings.Contains(err.Error(), "/data/a") {
		releaseAll(c)
		t.Fatalf("b on a's kept slot: %v; want an error naming /data/a", err)
	}
	// The same data directory twice (two ups that passed the pid file's
	// check at once): "already running", not advice to purge.
	if _, c, err := loadNetwork(pb, "/data/a"); err == nil || !strings.Contains(err.Error(), "already running") || strings.Contains(err.Error(), "--purge") {
		releaseAll(c)
		t.Fatalf("a's own slot again: %v; want already running", err)
	}
	releaseAll(ca)
	b, cb, err = loadNetwork(pb, "/data/b")
	if err != nil || b != a {
		t.Fatalf("b on the slot once a released it: %+v, %v", b, err)
	}
	releaseAll(cb)
}

// TestRealNetworkClaims: a new real network plan claims its VPC, uplink,
// pod and Service ranges under the names a kept plan is claimed by, so a
// second environment searching from the same start gets other ranges and
// cannot start on a copy; plans are claimed by their ranges, so an old
// plan in 198.19.0.0/16 and a new one at the same offset of
// 198.18.0.0/16 do not block each other.
func TestRealNetworkClaims(t *testing.T) {
	la, lb := layout{dir: t.TempDir()}, layout{dir: t.TempDir()}
	first, seed := realNetworkStart(la.dir)
	a, claims, err := newRealNetwork(la, first, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { releaseAll(claims) }()
	if len(claims) != 4 {
		t.Fatalf("%d claims, want 4 (VPC, uplink, pods, Services)", len(claims))
	}
	b, cb, err := newRealNetwork(lb, first, seed)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(cb)
	if b.Block == a.Block || b.Uplink == a.Uplink || b.Pods == a.Pods || b.Services == a.Services {
		t.Errorf("b, searching from a's start, shares a range with a: %+v, %+v", b, a)
	}
	data, _ := os.ReadFile(la.realNetworkFile())
	if err := os.WriteFile(lb.realNetworkFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, cb, err := loadRealNetwork(lb); err == nil || !strings.Contains(err.Error(), la.dir) || !strings.Contains(err.Error(), a.Block.String()) {
		releaseAll(cb)
		t.Fatalf("b on a's kept plan: %v; want an error naming a's VPC and data directory", err)
	}
	old := a
	old.Block = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, a.Block.Addr().As4()[2], 0}), 22)
	old.Uplink = netip.MustParsePrefix("198.19.254.0/30")
	old.Pods, old.Services = netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.201.0.0/16")
	if co, err := claimRealNetwork(lb, old); err != nil {
		t.Errorf("an old plan at a's offset in 198.19.0.0/16: %v", err)
	} else {
		releaseAll(co)
	}
	releaseAll(claims)
	b, cb, err = loadRealNetwork(lb)
	if err != nil || b.Block != a.Block {
		t.Fatalf("b on a's plan once released: %+v, %v", b, err)
	}
	releaseAll(cb)
}
