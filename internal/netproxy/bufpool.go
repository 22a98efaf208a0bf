package netproxy

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
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
	if o, ok := v.(*OutData); ok {
		return o.marshal()
	}
	if r, ok := v.(*Received); ok {
		if r.raw != nil {
			// Forwarded unchanged: gRPC frees what Marshal returns once it
			// is written, the receiver frees its own reference.
			r.raw.Ref()
			return mem.BufferSlice{r.raw}, nil
		}
		v = r.Packet
	}
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
	if r, ok := v.(*Received); ok {
		return r.unmarshal(data)
	}
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

// Received is a packet received with RecvPacket. A DATA packet's payload
// aliases the pooled buffer it arrived in, with no copy and no garbage:
// it is valid until Free, which the consumer calls once the send or write
// that uses the payload has returned (gRPC's SendMsg has then encoded it
// or taken a reference of its own, net.Conn.Write is synchronous).
//
// Sending a Received (SendMsg, not Send) forwards a DATA packet as the
// bytes it arrived as, without re-encoding: only for packets that need no
// change (the connectID is the same on both hops).
type Received struct {
	*client.Packet
	raw mem.Buffer // the encoded packet, for DATA; nil otherwise
}

// RecvPacket receives one packet into r, which it resets; the caller
// must Free r when done with it.
func RecvPacket(s interface{ RecvMsg(any) error }, r *Received) error {
	r.Packet = &client.Packet{}
	r.raw = nil
	return s.RecvMsg(r)
}

// Free returns the packet's buffer to the pool; the payload must not be
// used afterwards.
func (r *Received) Free() {
	if r.raw != nil {
		r.raw.Free()
		r.raw = nil
	}
}

func (r *Received) unmarshal(data mem.BufferSlice) error {
	if r.Packet == nil {
		r.Packet = &client.Packet{}
	}
	buf := data.MaterializeToBuffer(sharedPool)
	if data.Len() > 1024 && decodeData(buf.ReadOnlyData(), r.Packet) {
		r.raw = buf
		return nil
	}
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), r.Packet)
}

// OutData is a DATA packet to send whose payload gRPC writes straight from
// a pooled buffer: Marshal returns the encoded header and the payload
// buffer as two pieces, so the payload is not copied into a message
// buffer first. Read into the buffer from NewOutData, then SetLen and
// send with SendMsg, then Free; gRPC keeps its own reference until the
// bytes are written.
type OutData struct {
	ConnectID int64
	bp        *[]byte
	n         int
	buf       mem.Buffer
}

// NewOutData takes a buffer of CopyBufSize from the pool.
func NewOutData(connectID int64) *OutData {
	return &OutData{ConnectID: connectID, bp: sharedPool.Get(CopyBufSize)}
}

// Buf is where the payload goes.
func (o *OutData) Buf() []byte { return *o.bp }

// SetLen fixes the payload length, n > 0.
func (o *OutData) SetLen(n int) {
	*o.bp = (*o.bp)[:n]
	o.n = n
	o.buf = mem.NewBuffer(o.bp, sharedPool)
}

// Free releases the sender's reference; the OutData must not be used again.
func (o *OutData) Free() {
	if o.buf != nil {
		o.buf.Free()
		o.buf = nil
	} else if o.bp != nil {
		*o.bp = (*o.bp)[:cap(*o.bp)]
		sharedPool.Put(o.bp)
	}
	o.bp = nil
}

func (o *OutData) marshal() (mem.BufferSlice, error) {
	if o.buf == nil {
		return nil, fmt.Errorf("netproxy codec: OutData sent without SetLen")
	}
	var inner []byte
	if o.ConnectID != 0 {
		inner = protowire.AppendTag(inner, 1, protowire.VarintType)
		inner = protowire.AppendVarint(inner, uint64(o.ConnectID))
	}
	inner = protowire.AppendTag(inner, 3, protowire.BytesType)
	inner = protowire.AppendVarint(inner, uint64(o.n))
	hdr := make([]byte, 0, 32)
	hdr = protowire.AppendTag(hdr, 1, protowire.VarintType)
	hdr = protowire.AppendVarint(hdr, uint64(client.PacketType_DATA))
	hdr = protowire.AppendTag(hdr, 4, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(len(inner)+o.n))
	hdr = append(hdr, inner...)
	o.buf.Ref()
	return mem.BufferSlice{mem.SliceBuffer(hdr), o.buf}, nil
}
