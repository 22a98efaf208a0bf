package nodeipam

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// rangeAllocator hands out one pod CIDR per cluster CIDR (one per family in
// dual-stack) to each node, and remembers which node holds which, so a
// deleted node's CIDRs are freed and nothing is handed out twice.
type rangeAllocator struct {
	mu    sync.Mutex
	sets  []*CIDRSet
	owned map[string][]netip.Prefix
}

func newRangeAllocator(clusterCIDRs []netip.Prefix, maskSizes []int, reserved []netip.Prefix) (*rangeAllocator, error) {
	if len(clusterCIDRs) != len(maskSizes) {
		return nil, fmt.Errorf("need one node CIDR mask size per cluster CIDR, have %d for %d", len(maskSizes), len(clusterCIDRs))
	}
	a := &rangeAllocator{owned: map[string][]netip.Prefix{}}
	for i, c := range clusterCIDRs {
		s, err := NewCIDRSet(c, maskSizes[i])
		if err != nil {
			return nil, err
		}
		for _, r := range reserved {
			s.Occupy(r)
		}
		a.sets = append(a.sets, s)
	}
	return a, nil
}

// occupy records that node holds cidrs (from its spec): at start-up and
// whenever a node with pod CIDRs is seen. It is idempotent.
func (a *rangeAllocator) occupy(node string, cidrs []netip.Prefix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.owned[node]; ok {
		if slices.Equal(old, cidrs) {
			return
		}
		a.releaseLocked(old)
	}
	a.owned[node] = cidrs
	for _, c := range cidrs {
		for _, s := range a.sets {
			s.Occupy(c)
		}
	}
}

// release frees the CIDRs node held; it reports whether anything was freed.
func (a *rangeAllocator) release(node string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	old, ok := a.owned[node]
	if !ok {
		return false
	}
	delete(a.owned, node)
	a.releaseLocked(old)
	return true
}

func (a *rangeAllocator) releaseLocked(cidrs []netip.Prefix) {
	for _, c := range cidrs {
		for _, s := range a.sets {
			s.Release(c) // a no-op outside the set; any size (a mask changed since)
		}
	}
}

// allocate takes one CIDR from each cluster CIDR for node, all or nothing.
// The caller writes them to the node and calls release if that fails.
func (a *rangeAllocator) allocate(node string) ([]netip.Prefix, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cidrs, ok := a.owned[node]; ok {
		return cidrs, nil // allocated before, the write did not land yet
	}
	var out []netip.Prefix
	for _, s := range a.sets {
		c, err := s.Allocate()
		if err != nil {
			a.releaseLocked(out)
			return nil, err
		}
		out = append(out, c)
	}
	a.owned[node] = out
	return out, nil
}

// usage returns (used, size) per cluster CIDR.
func (a *rangeAllocator) usage() map[string][2]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][2]int{}
	for _, s := range a.sets {
		out[s.Cluster().String()] = [2]int{s.Used(), s.Size()}
	}
	return out
}
