package link

import (
	"context"
	"io"
	"testing"
)

// BenchmarkLinkBulk: bytes one way through one connection of a session
// pair on loopback TCP (no TLS: the framing's own cost), the receiver
// writing to io.Discard through WriteTo as the agent writes to its
// destination. ns/op is per 256 KiB write.
func BenchmarkLinkBulk(b *testing.B) {
	d, a := pairB(b)
	acceptEach(a, func(st *Stream) { go func() { _, _ = st.WriteTo(io.Discard) }() })
	st, err := d.Dial(context.Background(), "tcp", "sink:1")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, MaxPayload)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	_ = st.Close()
}

// BenchmarkLinkDial: dial, a one-byte echo, close.
func BenchmarkLinkDial(b *testing.B) {
	d, a := pairB(b)
	acceptEach(a, echo)
	one := []byte{1}
	b.ReportAllocs()
	for b.Loop() {
		st, err := d.Dial(context.Background(), "tcp", "echo:1")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(st, one); err != nil {
			b.Fatal(err)
		}
		_ = st.Close()
	}
}

func pairB(b *testing.B) (*Session, *Session) { return pairTB(b) }
