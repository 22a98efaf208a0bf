package store

import (
	"bytes"
	"net/netip"

	"github.com/portside-io/portside/internal/netaddr"
)

// RouteCIDRs indexes route destinations per cluster, so that the overlap
// check of a new route costs a few lookups instead of decoding every route
// (5,000 routes made route creation quadratic). Key: cluster, 0, the
// family (4 or 6), the address (4 or 16 bytes), the prefix length; value:
// the route's name.
const RouteCIDRs = "route-cidrs"

func routeKey(cluster string, p netip.Prefix) []byte {
	k := append([]byte(cluster), 0, familyOf(p))
	k = append(k, p.Addr().AsSlice()...)
	return append(k, byte(p.Bits()))
}

// IndexRoute records that route name of cluster covers p.
func (t *Tx) IndexRoute(cluster string, p netip.Prefix, name string) error {
	return t.bucket(RouteCIDRs).Put(routeKey(cluster, p.Masked()), []byte(name))
}

// UnindexRoute forgets p.
func (t *Tx) UnindexRoute(cluster string, p netip.Prefix) error {
	return t.bucket(RouteCIDRs).Delete(routeKey(cluster, p.Masked()))
}

// OverlappingRoute returns the name and CIDR of a route of cluster whose
// destination overlaps p, if there is one.
func (t *Tx) OverlappingRoute(cluster string, p netip.Prefix) (string, netip.Prefix, bool) {
	p = p.Masked()
	b := t.bucket(RouteCIDRs)
	// A route containing p (or equal to it): one lookup per shorter length.
	for l := 0; l <= p.Bits(); l++ {
		q, _ := p.Addr().Prefix(l)
		if v := b.Get(routeKey(cluster, q)); v != nil {
			return string(v), q, true
		}
	}
	// A route inside p: its address lies in p's range, so its key sorts
	// between p's first and last address.
	head := append([]byte(cluster), 0, familyOf(p))
	k, v := b.Cursor().Seek(routeKey(cluster, netip.PrefixFrom(p.Addr(), 0)))
	if k != nil && bytes.HasPrefix(k, head) {
		if a, _ := netip.AddrFromSlice(k[len(head) : len(k)-1]); a.Compare(netaddr.Last(p)) <= 0 {
			return string(v), netip.PrefixFrom(a, int(k[len(k)-1])), true
		}
	}
	return "", netip.Prefix{}, false
}

func familyOf(p netip.Prefix) byte {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// ClearRouteIndex empties the index, to rebuild it from the routes (state
// written before the index existed).
func (t *Tx) ClearRouteIndex() error {
	b := t.bucket(RouteCIDRs)
	var keys [][]byte
	_ = b.ForEach(func(k, _ []byte) error { keys = append(keys, bytes.Clone(k)); return nil })
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
