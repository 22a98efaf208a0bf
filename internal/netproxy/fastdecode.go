package netproxy

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// decodeData decodes a DATA packet with its payload aliasing b, saving
// the copy proto.Unmarshal makes of every byte proxied; b must not be
// reused. It reports false for anything but a plainly encoded DATA packet,
// which the caller then decodes the ordinary way.
func decodeData(b []byte, p *client.Packet) bool {
	var typ client.PacketType
	var d *client.Data
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && wt == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			typ, b = client.PacketType(v), b[n:]
		case num == 4 && wt == protowire.BytesType && d == nil:
			msg, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if d = decodeDataMsg(msg); d == nil {
				return false
			}
		default:
			return false
		}
	}
	if typ != client.PacketType_DATA || d == nil {
		return false
	}
	p.Type = typ
	p.Payload = &client.Packet_Data{Data: d}
	return true
}

func decodeDataMsg(b []byte) *client.Data {
	d := &client.Data{}
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		switch {
		case num == 1 && wt == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil
			}
			d.ConnectID, b = int64(v), b[n:]
		case num == 2 && wt == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) { // proto3 strings must be UTF-8
				return nil
			}
			d.Error, b = string(v), b[n:]
		case num == 3 && wt == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			d.Data, b = v[:len(v):len(v)], b[n:]
		default:
			return nil
		}
	}
	return d
}
