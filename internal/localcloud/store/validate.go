package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// bbolt's on-disk format (v1.x, little-endian on the platforms we run on).
const (
	pageHeader   = 16 // id u64, flags u16, count u16, overflow u32
	elemSize     = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	bucketHeader = 16 // root u64, sequence u64
	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagFreelist = 0x10
	leafBucket   = 0x01
	boltMagic    = 0xED0CDAED
	boltVersion  = 2
	noFreelist   = ^uint64(0)
)

var le = binary.LittleEndian

// validateFile walks the B+tree of a bbolt file with bounds-checked reads,
// so that damage bbolt would trip on (it follows page ids and offsets
// through unsafe pointers into its mmap, where a bad one faults or, under
// -race, is a fatal checkptr error) is found before bbolt opens the file.
// An empty file is valid: bbolt initializes it.
func validateFile(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	meta, ps, err := pickMeta(data)
	if err != nil {
		return err
	}
	v := &validator{data: data, ps: ps, hwm: le.Uint64(meta[40:]), seen: map[uint64]bool{0: true, 1: true}}
	if v.hwm < 2 || v.hwm > uint64(len(data))/ps {
		return fmt.Errorf("high water mark page %d is past the end of the file (%d bytes, truncated?)", v.hwm, len(data))
	}
	if fl := le.Uint64(meta[32:]); fl != noFreelist {
		if err := v.freelist(fl); err != nil {
			return err
		}
	}
	return v.bucket(le.Uint64(meta[16:]), nil, 0)
}

// pickMeta returns the newest valid meta page and the page size.
func pickMeta(data []byte) ([]byte, uint64, error) {
	var best []byte
	var ps uint64
	var firstErr error
	try := func(off uint64) {
		if off+pageHeader+64 > uint64(len(data)) {
			return
		}
		m := data[off+pageHeader : off+pageHeader+64]
		err := checkMeta(m)
		if err == nil && (best == nil || le.Uint64(m[48:]) > le.Uint64(best[48:])) {
			best, ps = m, uint64(le.Uint32(m[8:]))
		} else if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	try(0)
	if best != nil {
		try(ps)
	} else {
		for s := uint64(1024); s <= 65536; s *= 2 {
			try(s)
		}
	}
	if best == nil {
		if firstErr == nil {
			firstErr = errors.New("file too small for a bbolt database")
		}
		return nil, 0, fmt.Errorf("no valid meta page: %w", firstErr)
	}
	return best, ps, nil
}

func checkMeta(m []byte) error {
	if le.Uint32(m[0:]) != boltMagic {
		return errors.New("not a bbolt database (bad magic)")
	}
	if le.Uint32(m[4:]) != boltVersion {
		return errors.New("unsupported bbolt version")
	}
	h := fnv.New64a()
	_, _ = h.Write(m[:56])
	if h.Sum64() != le.Uint64(m[56:]) {
		return errors.New("meta page checksum mismatch")
	}
	if ps := le.Uint32(m[8:]); ps < 1024 || ps > 65536 || ps&(ps-1) != 0 {
		return fmt.Errorf("bad page size %d", ps)
	}
	return nil
}

type validator struct {
	data []byte
	ps   uint64
	hwm  uint64
	seen map[uint64]bool
}

// page returns page id with its overflow, checking it lies in the file and
// is referenced once.
func (v *validator) page(id uint64) ([]byte, error) {
	if id < 2 || id >= v.hwm {
		return nil, fmt.Errorf("page id %d out of range 2-%d", id, v.hwm-1)
	}
	if v.seen[id] {
		return nil, fmt.Errorf("page %d is referenced twice", id)
	}
	off := id * v.ps
	hdr := v.data[off : off+pageHeader]
	if le.Uint64(hdr) != id {
		return nil, fmt.Errorf("page %d has id %d", id, le.Uint64(hdr))
	}
	end := id + 1 + uint64(le.Uint32(hdr[12:]))
	if end > v.hwm {
		return nil, fmt.Errorf("page %d overflows past the high water mark", id)
	}
	for i := id; i < end; i++ {
		v.seen[i] = true
	}
	return v.data[off : end*v.ps], nil
}

func (v *validator) freelist(id uint64) error {
	p, err := v.page(id)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if le.Uint16(p[8:])&flagFreelist == 0 {
		return fmt.Errorf("freelist page %d has flags %#x", id, le.Uint16(p[8:]))
	}
	n, start := uint64(le.Uint16(p[10:])), uint64(pageHeader)
	if n == 0xFFFF {
		if len(p) < pageHeader+8 {
			return fmt.Errorf("freelist page %d is short", id)
		}
		n, start = le.Uint64(p[pageHeader:]), pageHeader+8
	}
	if n > (uint64(len(p))-start)/8 {
		return fmt.Errorf("freelist page %d: %d ids do not fit", id, n)
	}
	for i := range n {
		if f := le.Uint64(p[start+8*i:]); f < 2 || f >= v.hwm {
			return fmt.Errorf("freelist page %d: free page id %d out of range", id, f)
		}
	}
	return nil
}

// bucket checks the tree of a bucket: root page id, or the inline page.
func (v *validator) bucket(root uint64, inline []byte, depth int) error {
	if depth > 64 {
		return errors.New("buckets nested too deep")
	}
	if root == 0 {
		return v.node(inline, true, depth)
	}
	p, err := v.page(root)
	if err != nil {
		return err
	}
	return v.node(p, false, depth)
}

// node checks a branch or leaf page p and what it references.
func (v *validator) node(p []byte, inline bool, depth int) error {
	if len(p) < pageHeader {
		return errors.New("inline bucket page is short")
	}
	id, flags, n := le.Uint64(p), le.Uint16(p[8:]), uint64(le.Uint16(p[10:]))
	if pageHeader+n*elemSize > uint64(len(p)) {
		return fmt.Errorf("page %d: %d elements do not fit", id, n)
	}
	for i := range n {
		e := pageHeader + i*elemSize
		var pos, ksize, vsize uint64
		switch {
		case flags&flagBranch != 0 && !inline:
			pos, ksize = uint64(le.Uint32(p[e:])), uint64(le.Uint32(p[e+4:]))
		case flags&flagLeaf != 0:
			pos, ksize, vsize = uint64(le.Uint32(p[e+4:])), uint64(le.Uint32(p[e+8:])), uint64(le.Uint32(p[e+12:]))
		default:
			return fmt.Errorf("page %d has flags %#x, want branch or leaf", id, flags)
		}
		if e+pos+ksize+vsize > uint64(len(p)) {
			return fmt.Errorf("page %d element %d runs past the page", id, i)
		}
		if flags&flagBranch != 0 {
			child, err := v.page(le.Uint64(p[e+8:]))
			if err != nil {
				return fmt.Errorf("page %d element %d: %w", id, i, err)
			}
			if err := v.node(child, false, depth); err != nil {
				return err
			}
			continue
		}
		if le.Uint32(p[e:])&leafBucket != 0 {
			val := p[e+pos+ksize : e+pos+ksize+vsize]
			if len(val) < bucketHeader {
				return fmt.Errorf("page %d element %d: bucket header is short", id, i)
			}
			if err := v.bucket(le.Uint64(val), val[bucketHeader:], depth+1); err != nil {
				return err
			}
		}
	}
	if flags&flagBranch != 0 && n == 0 {
		return fmt.Errorf("branch page %d is empty", id)
	}
	return nil
}
