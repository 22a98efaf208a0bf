package link

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Hello is the agent's first message on a link, before any frame: what
// the gRPC link's metadata says (agentID, agentIdentifiers, the service
// account token), so the server authenticates and decides the agent's
// identity exactly as for a gRPC agent. Who the peer is comes from the
// mTLS handshake and the token, never from these claims alone.
type Hello struct {
	AgentID          string `json:"agentID"`
	AgentIdentifiers string `json:"agentIdentifiers,omitempty"`
	Token            string `json:"token,omitempty"`
}

// Welcome is the server's answer: its ID and count (the gRPC link's
// serverID and serverCount headers), or why the agent was refused, with
// the gRPC status code name the gRPC link would have ended with
// (Unauthenticated, Unavailable, ...), so the agent's retry decisions
// are the same on both.
type Welcome struct {
	ServerID    string `json:"serverID,omitempty"`
	ServerCount int    `json:"serverCount,omitempty"`
	Code        string `json:"code,omitempty"`
	Refused     string `json:"refused,omitempty"`
}

// maxHello bounds a hello or welcome: a projected token is a few KiB.
const maxHello = 64 << 10

// WriteMessage writes a Hello or Welcome: a 4-byte big-endian length and
// JSON. One Write, so a batched TLS connection sends one record.
func WriteMessage(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxHello {
		return fmt.Errorf("portside-link: hello of %d bytes, over %d", len(b), maxHello)
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(msg, b...))
	return err
}

// ReadMessage reads exactly one message written by WriteMessage (no read
// ahead: the session's frames follow on the same connection).
func ReadMessage(r io.Reader, v any) error {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return fmt.Errorf("portside-link: reading the hello: %w", err)
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n == 0 || n > maxHello {
		return fmt.Errorf("portside-link: hello of %d bytes (at most %d): not a portside-link/2 peer", n, maxHello)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("portside-link: reading the hello: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("portside-link: malformed hello: %w", err)
	}
	return nil
}

// ErrNoLink is returned by an agent whose server chose another protocol
// (an upstream server, or an L7 proxy between them picked h2).
var ErrNoLink = errors.New("portside-link: the server did not choose " + ALPN)
