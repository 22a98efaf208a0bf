package nodeipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// maxSubnetBits bounds the node subnets of an IPv6 cluster CIDR to 2^16
// (upstream's limit); IPv4 allows 2^24 (a 2 MiB bitmap).
const maxSubnetBits, maxSubnetBitsIPv4 = 16, 24

// ErrExhausted is returned when a cluster CIDR has no free node subnet.
var ErrExhausted = errors.New("no free pod CIDR left in the cluster CIDR")

// CIDRSet hands out the node-sized subnets of one cluster CIDR. It is not
// safe for concurrent use; the allocator serializes access.
type CIDRSet struct {
	cluster  netip.Prefix
	nodeBits int
	used     []uint64 // bitmap of taken subnets
	size     int
	inUse    int
	next     int // where the next search starts, so freed subnets are reused last
}

// NewCIDRSet returns the set of /nodeBits subnets of cluster.
func NewCIDRSet(cluster netip.Prefix, nodeBits int) (*CIDRSet, error) {
	cluster = cluster.Masked()
	if nodeBits < cluster.Bits() || nodeBits > cluster.Addr().BitLen() {
		return nil, fmt.Errorf("node CIDR mask size /%d does not fit in cluster CIDR %s: it must be between /%d and /%d", nodeBits, cluster, cluster.Bits(), cluster.Addr().BitLen())
	}
	limit := maxSubnetBits
	if cluster.Addr().Is4() {
		limit = maxSubnetBitsIPv4
	}
	if nodeBits-cluster.Bits() > limit {
		return nil, fmt.Errorf("cluster CIDR %s with node CIDR mask size /%d has more than 2^%d node subnets: use a mask size of at most /%d or a smaller cluster CIDR", cluster, nodeBits, limit, cluster.Bits()+limit)
	}
	size := 1 << (nodeBits - cluster.Bits())
	return &CIDRSet{cluster: cluster, nodeBits: nodeBits, size: size, used: make([]uint64, (size+63)/64)}, nil
}

// Cluster is the set's cluster CIDR.
func (s *CIDRSet) Cluster() netip.Prefix { return s.cluster }

// Size is the number of node subnets; Used how many are taken.
func (s *CIDRSet) Size() int { return s.size }

func (s *CIDRSet) taken(i int) bool { return s.used[i/64]&(1<<(i%64)) != 0 }

func (s *CIDRSet) set(i int, used bool) {
	if s.taken(i) == used {
		return
	}
	s.used[i/64] ^= 1 << (i % 64)
	if used {
		s.inUse++
	} else {
		s.inUse--
	}
}

// Used is the number of subnets taken.
func (s *CIDRSet) Used() int { return s.inUse }

// Allocate takes the next free subnet.
func (s *CIDRSet) Allocate() (netip.Prefix, error) {
	for n := 0; n < s.size; {
		idx := (s.next + n) % s.size
		if idx%64 == 0 && s.used[idx/64] == ^uint64(0) && idx+64 <= s.size {
			n += 64 // a full word
			continue
		}
		if !s.taken(idx) {
			s.set(idx, true)
			s.next = (idx + 1) % s.size
			return s.subnet(idx), nil
		}
		n++
	}
	return netip.Prefix{}, fmt.Errorf("%w %s (%d subnets of /%d, all in use)", ErrExhausted, s.cluster, s.size, s.nodeBits)
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
	first, last := 0, s.size-1
	if p.Bits() > s.cluster.Bits() { // p inside the cluster CIDR
		first = s.index(p.Addr())
		last = first
		if p.Bits() < s.nodeBits {
			last = first + 1<<(s.nodeBits-p.Bits()) - 1
		}
	}
	for i := first; i <= last; i++ {
		s.set(i, used)
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
