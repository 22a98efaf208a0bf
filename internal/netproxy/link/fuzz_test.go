package link

import (
	"io"
	"net"
	"testing"
	"time"
)

// FuzzAcceptingSide feeds arbitrary bytes to an agent's end of a link, as
// a hostile or broken server could: the session must neither panic nor
// hang, and whatever it accepted must be released when it ends. Seeds:
// valid exchanges and each protocol error of TestProtocolErrors.
// go test -fuzz FuzzAcceptingSide ./internal/netproxy/link
func FuzzAcceptingSide(f *testing.F) {
	ok := append(dialFrame(1), dataFrame(1, 100)...)
	f.Add(dialFrame(1))
	f.Add(ok)
	f.Add(append(dialFrame(1), appendHeader(nil, header{typ: frameClose, id: 1})...))
	f.Add(append(appendHeader(nil, header{typ: framePing, length: 8}), make([]byte, 8)...))
	f.Add(appendHeader(nil, header{typ: frameData, length: MaxPayload + 1, id: 1}))
	f.Add(append(dialFrame(2), dialFrame(2)...))
	f.Add(append(appendHeader(nil, header{typ: 250, length: 3}), 1, 2, 3))
	f.Fuzz(func(t *testing.T, in []byte) {
		c1, c2 := net.Pipe()
		s := Server(c2, Config{Window: MinWindow})
		go func() { _, _ = io.Copy(io.Discard, c1) }()
		// Accept every dial and read it out, as an agent would.
		acceptEach(s, func(st *Stream) { go func() { _, _ = st.WriteTo(io.Discard); _ = st.Close() }() })
		_ = c1.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = c1.Write(in)
		_ = c1.Close()
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the session did not end when its connection did")
		}
		if s.NumStreams() != 0 {
			t.Fatalf("%d streams kept after the end", s.NumStreams())
		}
	})
}
