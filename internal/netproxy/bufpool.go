package netproxy

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// bufferPool is gRPC's buffer pool without zeroing, with a tier that fits
// a full data packet. gRPC's default pool clears the whole capacity of
// every buffer it hands out, and its tier above 32 KiB is 1 MiB: each 64
// KiB packet cost a 1 MiB memclr, a third of the proxy's CPU. gRPC fills
// every buffer it takes before reading it, so zeroing buys nothing.
type bufferPool struct {
	tiers []int
	pools []sync.Pool
}

var sharedPool = newBufferPool(256, 4<<10, 16<<10, 32<<10, 64<<10+1024, CopyBufSize+1024, 1<<20)

func newBufferPool(tiers ...int) *bufferPool {
	return &bufferPool{tiers: tiers, pools: make([]sync.Pool, len(tiers))}
}

func (p *bufferPool) tier(size int) int {
	for i, t := range p.tiers {
		if size <= t {
			return i
		}
	}
	return -1
}

func (p *bufferPool) Get(size int) *[]byte {
	i := p.tier(size)
	if i < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.pools[i].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, p.tiers[i])
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	// Only buffers of exactly a tier's capacity come back to it, so Get
	// can always reslice to the tier size.
	for i, t := range p.tiers {
		if c == t {
			p.pools[i].Put(b)
			return
		}
	}
}

var _ mem.BufferPool = (*bufferPool)(nil)

// codec is gRPC's proto codec drawing from sharedPool: the stock codec
// takes its buffers from the zeroing default pool regardless of the
// transport's pool option.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("netproxy codec: %T is not a proto message", v)
	}
	size := proto.Size(m)
	buf := sharedPool.Get(size)
	out, err := proto.MarshalOptions{}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		sharedPool.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, sharedPool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("netproxy codec: %T is not a proto message", v)
	}
	if p, ok := m.(*client.Packet); ok && data.Len() > 1024 {
		// Large messages are DATA: decode them aliasing a buffer of their
		// own rather than copying the payload a second time.
		b := data.Materialize()
		if decodeData(b, p) {
			return nil
		}
		return proto.Unmarshal(b, m)
	}
	buf := data.MaterializeToBuffer(sharedPool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
