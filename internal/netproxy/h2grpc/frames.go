package h2grpc

import (
	"encoding/binary"
	"strconv"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// The frames this side writes, appended to a buffer by hand (RFC 9113
// section 6) so that several go out in one write.

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func appendSettings(b []byte, settings []http2.Setting) []byte {
	b = appendFrameHeader(b, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

func appendSettingsAck(b []byte) []byte {
	return appendFrameHeader(b, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
}

func appendWindowUpdate(b []byte, id, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, id)
	return binary.BigEndian.AppendUint32(b, inc&0x7fffffff)
}

func appendRSTStream(b []byte, id uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, id)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendPing(b []byte, ack bool, data [8]byte) []byte {
	var flags http2.Flags
	if ack {
		flags = http2.FlagPingAck
	}
	b = appendFrameHeader(b, 8, http2.FramePing, flags, 0)
	return append(b, data[:]...)
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode, debug string) []byte {
	b = appendFrameHeader(b, 8+len(debug), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last&0x7fffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, debug...)
}

// appendHeaders frames a header block: HEADERS, then CONTINUATION frames
// for what exceeds the smallest frame size every peer accepts.
func appendHeaders(b []byte, id uint32, block []byte, endStream bool) []byte {
	first := true
	for {
		n := min(len(block), defaultFrameSize)
		var flags http2.Flags
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		t := http2.FrameContinuation
		if first {
			t = http2.FrameHeaders
			if endStream {
				flags |= http2.FlagHeadersEndStream
			}
		}
		b = appendFrameHeader(b, n, t, flags, id)
		b = append(b, block[:n]...)
		block = block[n:]
		first = false
		if len(block) == 0 {
			return b
		}
	}
}

// appendResponseHeaders appends the response's HEADERS (under wmu).
func (c *serverConn) appendResponseHeaders(b []byte, id uint32) []byte {
	c.hbuf = c.hbuf[:0]
	c.field(":status", "200")
	c.field("content-type", "application/grpc")
	return appendHeaders(b, id, c.hbuf, false)
}

// appendTrailers appends a stream's status; trailers-only (with the
// response's headers) when no headers were sent (under wmu).
func (c *serverConn) appendTrailers(b []byte, id uint32, headersSent bool, code codes.Code, msg string) []byte {
	c.hbuf = c.hbuf[:0]
	if !headersSent {
		c.field(":status", "200")
		c.field("content-type", "application/grpc")
	}
	c.field("grpc-status", strconv.Itoa(int(code)))
	if msg != "" {
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
		c.field("grpc-message", encodeMessage(msg))
	}
	return appendHeaders(b, id, c.hbuf, true)
}
