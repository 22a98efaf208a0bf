package netproxy

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

type msgStream struct{ in mem.BufferSlice }

func (s msgStream) RecvMsg(m any) error { return codec{}.Unmarshal(s.in, m) }

// A received DATA packet aliases its pooled buffer and is forwarded as the
// bytes it arrived as; other packets decode and re-encode as usual.
func TestReceivedForwardsDATAUnchanged(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 40<<10)
	for _, p := range []*client.Packet{Data(9, payload), Data(9, []byte("small")), CloseRsp(9, "gone")} {
		wire, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		bp := sharedPool.Get(len(wire))
		copy(*bp, wire)
		var r Received
		if err := RecvPacket(msgStream{mem.BufferSlice{mem.NewBuffer(bp, sharedPool)}}, &r); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(r.Packet, p) {
			t.Fatalf("decoded %v, want %v", r.Packet, p)
		}
		if big := len(wire) > 1024; big != (r.raw != nil) {
			t.Fatalf("%v: pooled buffer kept = %v", p.Type, r.raw != nil)
		}
		out, err := codec{}.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !bytes.Equal(got, wire) {
			t.Fatalf("%v: forwarded %d bytes differ from the %d received", p.Type, len(got), len(wire))
		}
		out.Free()
		r.Free()
		r.Free() // idempotent
	}
}

// OutData encodes exactly as the generated code does.
func TestOutDataEncoding(t *testing.T) {
	for _, id := range []int64{0, 1, 300, -5} {
		o := NewOutData(id)
		n := copy(o.Buf(), bytes.Repeat([]byte("abc"), 20_000))
		o.SetLen(n)
		out, err := codec{}.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(Data(id, bytes.Repeat([]byte("abc"), 20_000)))
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("connectID %d: OutData encodes %d bytes, want %d", id, len(got), len(want))
		}
		out.Free()
		o.Free()
	}
	NewOutData(1).Free() // never sent
}
