package nodeipam

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCIDRSetAllocatesDistinctSubnetsAndReservesServices(t *testing.T) {
	s, err := NewCIDRSet(netip.MustParsePrefix("10.100.0.0/22"), 24)
	if err != nil {
		t.Fatal(err)
	}
	s.Occupy(netip.MustParsePrefix("10.100.1.128/25")) // a service range inside the second subnet
	got := map[netip.Prefix]bool{}
	for range 3 {
		p, err := s.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got[p] = true
	}
	want := []string{"10.100.0.0/24", "10.100.2.0/24", "10.100.3.0/24"}
	for _, w := range want {
		if !got[netip.MustParsePrefix(w)] {
			t.Errorf("allocated %v, want %v", got, want)
		}
	}
	if _, err := s.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("4th allocation: %v, want ErrExhausted", err)
	}
	s.Release(netip.MustParsePrefix("10.100.2.0/24"))
	if p, err := s.Allocate(); err != nil || p.String() != "10.100.2.0/24" {
		t.Fatalf("after release: %v %v", p, err)
	}
	if s.Used() != 4 || s.Size() != 4 {
		t.Fatalf("used %d size %d", s.Used(), s.Size())
	}
}

func TestCIDRSetIPv6AndWholeClusterOccupied(t *testing.T) {
	s, err := NewCIDRSet(netip.MustParsePrefix("fd00:10::/56"), 64)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Allocate()
	q, _ := s.Allocate()
	if p.String() != "fd00:10::/64" || q.String() != "fd00:10:0:1::/64" {
		t.Fatalf("got %s %s", p, q)
	}
	s.Occupy(netip.MustParsePrefix("fd00::/8")) // contains the whole cluster CIDR
	if _, err := s.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("want exhausted, got %v", err)
	}
	s.Occupy(netip.MustParsePrefix("10.0.0.0/8")) // other family: ignored
	if _, err := NewCIDRSet(netip.MustParsePrefix("fd00::/32"), 64); err == nil {
		t.Fatal("a /32 of /64s (2^32 subnets) must be refused")
	}
	if _, err := NewCIDRSet(netip.MustParsePrefix("10.0.0.0/16"), 8); err == nil {
		t.Fatal("a mask shorter than the cluster CIDR must be refused")
	}
}

func TestRangeAllocatorIsIdempotentAndRebuildsFromNodes(t *testing.T) {
	clusters := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/23"), netip.MustParsePrefix("fd00:1::/63")}
	a, err := newRangeAllocator(clusters, []int{24, 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := a.allocate("n1")
	if err != nil || len(first) != 2 {
		t.Fatalf("%v %v", first, err)
	}
	again, _ := a.allocate("n1")
	if again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("second allocate for the same node gave %v, want %v", again, first)
	}
	// A new allocator (restart) learns n1's CIDRs before allocating.
	b, _ := newRangeAllocator(clusters, []int{24, 64}, nil)
	b.occupy("n1", first)
	second, err := b.allocate("n2")
	if err != nil || second[0] == first[0] || second[1] == first[1] {
		t.Fatalf("n2 got %v (n1 has %v): %v", second, first, err)
	}
	if _, err := b.allocate("n3"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("n3: %v", err)
	}
	if b.usage()["fd00:1::/63"] != [2]int{2, 2} {
		t.Fatalf("IPv6 must not leak when IPv4 is exhausted: %v", b.usage())
	}
	b.release("n1")
	if got, err := b.allocate("n3"); err != nil || got[0] != first[0] {
		t.Fatalf("n3 after n1 released: %v %v", got, err)
	}
}

func TestCIDRSetLargeIPv4AndOddSizes(t *testing.T) {
	s, err := NewCIDRSet(netip.MustParsePrefix("10.0.0.0/8"), 26) // 2^18 subnets
	if err != nil {
		t.Fatal(err)
	}
	for range 70 { // across a bitmap word
		if _, err := s.Allocate(); err != nil {
			t.Fatal(err)
		}
	}
	if p, _ := s.Allocate(); p.String() != "10.0.17.128/26" {
		t.Fatalf("71st subnet %s", p)
	}
	// A node given a /25 by hand (or before the mask changed) is occupied
	// and freed whole.
	s.Occupy(netip.MustParsePrefix("10.1.0.0/25"))
	before := s.Used()
	s.Release(netip.MustParsePrefix("10.1.0.0/25"))
	if s.Used() != before-2 {
		t.Fatalf("releasing a /25 freed %d /26s, want 2", before-s.Used())
	}
	a, _ := newRangeAllocator([]netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}, []int{24}, nil)
	a.occupy("hand", []netip.Prefix{netip.MustParsePrefix("10.2.5.0/25")})
	a.release("hand")
	if a.usage()["10.2.0.0/16"][0] != 0 {
		t.Fatalf("a /25 of a /24 set not freed: %v", a.usage())
	}
}
