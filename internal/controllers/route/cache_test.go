package route

import (
	"context"
	"net/netip"
	"testing"

	"github.com/portside-io/portside/pkg/cloud"
)

func TestRouteCacheKeepsCreatesThatRaceAList(t *testing.T) {
	c := newRouteCache()
	ctx := context.Background()
	a, b := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.2.0/24")
	c.added("n1", a, nil) // before the list: the list is the truth
	_, err := c.list(ctx, func(context.Context) ([]cloud.Route, error) {
		c.added("n2", b, nil) // completes while the list runs: the list may miss it
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.routesTo("n1"); len(got) != 0 {
		t.Errorf("a create the list should have shown is kept: %v", got)
	}
	if got := c.routesTo("n2"); len(got) != 1 {
		t.Fatalf("a create that raced the list was dropped: %v", got)
	}

	// Resolving the pending route lists again; the cloud names it, even as
	// a blackhole (its instance is gone).
	lists := 0
	r, ok, err := c.resolve(ctx, "n2", b, func(context.Context) ([]cloud.Route, error) {
		lists++
		return []cloud.Route{{Name: "uid-ipv4", TargetNode: "n2", DestinationCIDR: b, Blackhole: true}}, nil
	})
	if err != nil || !ok || r.Name != "uid-ipv4" || lists != 1 {
		t.Fatalf("resolve = %+v %v %v after %d lists", r, ok, err, lists)
	}
	// Named now: no further list.
	if _, _, _ = c.resolve(ctx, "n2", b, func(context.Context) ([]cloud.Route, error) { lists++; return nil, nil }); lists != 1 {
		t.Fatal("a named route was listed again")
	}
	// A pending route the cloud does not show after a later list is gone.
	c.added("n3", a, nil)
	_, ok, err = c.resolve(ctx, "n3", a, func(context.Context) ([]cloud.Route, error) { return nil, nil })
	if err != nil || ok {
		t.Fatalf("resolve of a vanished route = %v %v", ok, err)
	}
}
