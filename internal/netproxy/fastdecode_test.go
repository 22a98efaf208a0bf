package netproxy

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// FuzzDecodeData: the fast path agrees with proto.Unmarshal whenever it
// accepts an input.
func FuzzDecodeData(f *testing.F) {
	for _, p := range []*client.Packet{Data(7, []byte("hello")), Data(0, nil), DialReq(1, "tcp", "a:1"),
		{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: -3, Error: "x", Data: []byte{0}}}}} {
		b, _ := proto.Marshal(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast client.Packet
		if !decodeData(append([]byte(nil), b...), &fast) {
			return
		}
		var slow client.Packet
		if err := proto.Unmarshal(b, &slow); err != nil {
			t.Fatalf("fast path accepted what proto rejects: %v", err)
		}
		if !proto.Equal(&fast, &slow) {
			t.Fatalf("fast %v != proto %v", &fast, &slow)
		}
	})
}
