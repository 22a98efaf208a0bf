package link

import "sync"

// Payload buffers by size class, not zeroed (each is filled before use).
var pools = [...]struct {
	size int
	p    sync.Pool
}{{size: 4 << 10}, {size: 32 << 10}, {size: MaxPayload}}

func getBuf(n int) []byte {
	for i := range pools {
		if n <= pools[i].size {
			if b, ok := pools[i].p.Get().(*[]byte); ok {
				return (*b)[:n]
			}
			return make([]byte, n, pools[i].size)
		}
	}
	return make([]byte, n)
}

func putBuf(b []byte) {
	for i := range pools {
		if cap(b) == pools[i].size {
			b = b[:0]
			pools[i].p.Put(&b)
			return
		}
	}
}
