// Package link is "portside-link/2", the framed multiplex between a
// Portside proxy server and a Portside agent, built to cost a fraction of
// the gRPC link both speak to upstream peers (docs/benchmarks.md, "Where
// the proxies' CPU goes"): a dial is one frame each way instead of an
// HTTP/2 stream with headers, each connection's bytes are DATA frames of
// up to 256 KiB read straight into pooled buffers, and writes go out
// through whichever sender finds the link idle, batched when it is busy,
// with no writer goroutine to hand off to.
//
// Head-of-line isolation is per connection credit, as with HTTP/2 stream
// windows but without a connection window: a sender may have at most
// Window bytes of a connection unacknowledged; the receiver buffers them
// and returns credit as its reader consumes them. The link's reader never
// blocks (a peer exceeding its credit is a protocol error), so one
// connection whose destination stops reading holds at most Window bytes
// and stalls nobody else.
//
// Peers agree on it by ALPN on the agent's mTLS connection (ALPN, offered
// before "h2"): an upstream server, or an L7 proxy in between, picks h2
// and the pair speaks gRPC as before. This package is the protocol only;
// the server and agent wire it to their dial and connection handling.
package link

import (
	"encoding/binary"
	"fmt"
)

// ALPN is the protocol name a Portside agent offers first.
const ALPN = "portside-link/2"

// Frame types. The dialing side (the proxy server) sends Dial; the
// accepting side (the agent) answers DialOK or DialErr for that ID.
const (
	frameDial    byte = 1 // payload: the dialer's window (uint32), network length (1 byte), network, address
	frameDialOK  byte = 2 // payload: the accepting side's window (uint32)
	frameDialErr byte = 3 // payload: the error's text
	frameData    byte = 4 // payload: bytes of the connection
	frameCredit  byte = 5 // payload: uint32 bytes the receiver consumed
	frameClose   byte = 6 // the connection is over (konnectivity's close is whole)
	framePing    byte = 7 // payload: 8 opaque bytes, echoed by a Pong
	framePong    byte = 8
	frameGoAway  byte = 9 // the sender takes no new dials (the agent draining)
)

// HeaderSize is a frame header's length: type, flags, two reserved bytes,
// the payload's length (uint32) and the connection's ID (uint64), big
// endian.
const HeaderSize = 16

// Limits of a frame's payload: data up to MaxPayload, every other frame
// small. Larger is a protocol error, so a peer cannot make the reader
// allocate what it claims.
const (
	MaxPayload     = 256 << 10
	maxControlSize = 4 << 10
)

type header struct {
	typ    byte
	length uint32
	id     uint64
}

func appendHeader(b []byte, h header) []byte {
	b = append(b, h.typ, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, h.length)
	return binary.BigEndian.AppendUint64(b, h.id)
}

// parseHeader reads a header and checks its length against its type.
// Unknown types are returned as they are (their payload is skipped:
// a newer peer's frame an older one ignores).
func parseHeader(b []byte) (header, error) {
	h := header{typ: b[0], length: binary.BigEndian.Uint32(b[4:8]), id: binary.BigEndian.Uint64(b[8:16])}
	limit := uint32(maxControlSize)
	if h.typ == frameData {
		limit = MaxPayload
	}
	if h.length > limit {
		return h, fmt.Errorf("portside-link: frame of type %d with %d bytes, over the %d allowed", h.typ, h.length, limit)
	}
	switch h.typ {
	case frameCredit:
		if h.length != 4 {
			return h, fmt.Errorf("portside-link: credit frame of %d bytes, want 4", h.length)
		}
	case framePing, framePong:
		if h.length != 8 {
			return h, fmt.Errorf("portside-link: ping frame of %d bytes, want 8", h.length)
		}
	case frameDialOK:
		if h.length != 4 {
			return h, fmt.Errorf("portside-link: dial answer of %d bytes, want 4", h.length)
		}
	case frameClose, frameGoAway:
		if h.length != 0 {
			return h, fmt.Errorf("portside-link: frame of type %d carries %d bytes, want none", h.typ, h.length)
		}
	}
	if h.id == 0 && h.typ <= frameClose {
		return h, fmt.Errorf("portside-link: frame of type %d for connection 0", h.typ)
	}
	return h, nil
}

// Window limits: each side tells the other its receive window per
// connection (in Dial and DialOK), so the two need not be configured
// alike; one outside these is a protocol error.
const (
	MinWindow = 4 << 10
	MaxWindow = 1 << 30
)

func checkWindow(w uint32) error {
	if w < MinWindow || w > MaxWindow {
		return fmt.Errorf("portside-link: window of %d bytes, outside %d-%d", w, MinWindow, MaxWindow)
	}
	return nil
}

func dialPayload(window int, network, address string) ([]byte, error) {
	if len(network) > 255 || 5+len(network)+len(address) > maxControlSize {
		return nil, fmt.Errorf("portside-link: dial %s %q too long", network, address)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(window))
	b = append(b, byte(len(network)))
	b = append(b, network...)
	return append(b, address...), nil
}

func parseDial(p []byte) (window int, network, address string, err error) {
	if len(p) < 5 || int(p[4]) > len(p)-5 {
		return 0, "", "", fmt.Errorf("portside-link: malformed dial frame (%d bytes)", len(p))
	}
	w := binary.BigEndian.Uint32(p)
	if err := checkWindow(w); err != nil {
		return 0, "", "", err
	}
	n := int(p[4])
	return int(w), string(p[5 : 5+n]), string(p[5+n:]), nil
}
