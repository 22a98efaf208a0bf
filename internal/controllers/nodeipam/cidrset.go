package nodeipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// maxSubnetBits bounds a cluster CIDR to 2^16 node subnets (upstream's limit
// too): the set is a bitmap held in memory.
const maxSubnetBits = 16

// ErrExhausted is returned when a cluster CIDR has no free node subnet.
var ErrExhausted = errors.New("no free pod CIDR left in the cluster CIDR")

// CIDRSet hands out the node-sized subnets of one cluster CIDR. It is not
// safe for concurrent use; the allocator serializes access.
type CIDRSet struct {
	cluster  netip.Prefix
	nodeBits int
	used     []bool
	inUse    int
	next     int // where the next search starts, so freed subnets are reused last
}

// NewCIDRSet returns the set of /nodeBits subnets of cluster.
func NewCIDRSet(cluster netip.Prefix, nodeBits int) (*CIDRSet, error) {
	cluster = cluster.Masked()
	if nodeBits < cluster.Bits() || nodeBits > cluster.Addr().BitLen() {
		return nil, fmt.Errorf("node CIDR mask size /%d does not fit in cluster CIDR %s: it must be between /%d and /%d", nodeBits, cluster, cluster.Bits(), cluster.Addr().BitLen())
	}
	if nodeBits-cluster.Bits() > maxSubnetBits {
		return nil, fmt.Errorf("cluster CIDR %s with node CIDR mask size /%d has more than 2^%d node subnets: use a larger mask size (at most /%d) or a smaller cluster CIDR", cluster, nodeBits, maxSubnetBits, cluster.Bits()+maxSubnetBits)
	}
	return &CIDRSet{cluster: cluster, nodeBits: nodeBits, used: make([]bool, 1<<(nodeBits-cluster.Bits()))}, nil
}

// Cluster is the set's cluster CIDR.
func (s *CIDRSet) Cluster() netip.Prefix { return s.cluster }

// Size is the number of node subnets; Used how many are taken.
func (s *CIDRSet) Size() int { return len(s.used) }

// Used is the number of subnets taken.
func (s *CIDRSet) Used() int { return s.inUse }

// Allocate takes the next free subnet.
func (s *CIDRSet) Allocate() (netip.Prefix, error) {
	for i := range len(s.used) {
		idx := (s.next + i) % len(s.used)
		if !s.used[idx] {
			s.used[idx] = true
			s.inUse++
			s.next = (idx + 1) % len(s.used)
			return s.subnet(idx), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w %s (%d subnets of /%d, all in use)", ErrExhausted, s.cluster, len(s.used), s.nodeBits)
}

// Occupy marks every subnet overlapping p as taken (a node's existing pod
// CIDR, or the service range). Prefixes outside the cluster CIDR are ignored.
func (s *CIDRSet) Occupy(p netip.Prefix) { s.mark(p, true) }

// Release frees the subnets overlapping p.
func (s *CIDRSet) Release(p netip.Prefix) { s.mark(p, false) }

// Contains reports whether p is one of the set's node subnets.
func (s *CIDRSet) Contains(p netip.Prefix) bool {
	return p.Bits() == s.nodeBits && s.cluster.Contains(p.Addr())
}

func (s *CIDRSet) mark(p netip.Prefix, used bool) {
	p = p.Masked()
	if p.Addr().Is4() != s.cluster.Addr().Is4() || !p.Overlaps(s.cluster) {
		return
	}
	first, last := 0, len(s.used)-1
	if p.Bits() > s.cluster.Bits() { // p inside the cluster CIDR
		first = s.index(p.Addr())
		last = first
		if p.Bits() < s.nodeBits {
			last = first + 1<<(s.nodeBits-p.Bits()) - 1
		}
	}
	for i := first; i <= last; i++ {
		if s.used[i] != used {
			s.used[i] = used
			if used {
				s.inUse++
			} else {
				s.inUse--
			}
		}
	}
}

func (s *CIDRSet) shift() uint { return uint(s.cluster.Addr().BitLen() - s.nodeBits) }

// index is the subnet number of an address inside the cluster CIDR.
func (s *CIDRSet) index(a netip.Addr) int {
	off := new(big.Int).Sub(toInt(a), toInt(s.cluster.Addr()))
	return int(off.Rsh(off, s.shift()).Int64())
}

func (s *CIDRSet) subnet(idx int) netip.Prefix {
	v := new(big.Int).Lsh(big.NewInt(int64(idx)), s.shift())
	v.Add(v, toInt(s.cluster.Addr()))
	buf := make([]byte, s.cluster.Addr().BitLen()/8)
	v.FillBytes(buf)
	a, _ := netip.AddrFromSlice(buf)
	return netip.PrefixFrom(a, s.nodeBits)
}

func toInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }
