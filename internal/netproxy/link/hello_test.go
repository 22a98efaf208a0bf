package link

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func TestHelloMessages(t *testing.T) {
	var buf bytes.Buffer
	in := Hello{AgentID: "node-a", AgentIdentifiers: "host=node-a", Token: strings.Repeat("t", 2000)}
	if err := WriteMessage(&buf, in); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("frames follow") // ReadMessage must not read past its message
	var out Hello
	if err := ReadMessage(&buf, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("read %+v, want %+v", out, in)
	}
	if buf.String() != "frames follow" {
		t.Fatalf("ReadMessage read ahead: %q left", buf.String())
	}

	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "reading the hello"},
		{"zero length", []byte{0, 0, 0, 0}, "not a portside-link/2 peer"},
		{"too long", binary.BigEndian.AppendUint32(nil, maxHello+1), "not a portside-link/2 peer"},
		{"truncated", append(binary.BigEndian.AppendUint32(nil, 10), "{}"...), "reading the hello"},
		{"not json", append(binary.BigEndian.AppendUint32(nil, 3), "abc"...), "malformed hello"},
		{"an HTTP/2 preface", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "not a portside-link/2 peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Hello
			err := ReadMessage(bytes.NewReader(tc.in), &h)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := WriteMessage(&buf, Hello{Token: strings.Repeat("x", maxHello)}); err == nil {
		t.Fatal("an oversized hello was written")
	}
}
