package agent

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/portside-io/portside/internal/netproxy"
)

// headerStream is a grpc.ClientStream whose response headers (and first
// message's error) are given.
type headerStream struct {
	hdr    metadata.MD
	hdrErr error
	recv   error
}

func (s *headerStream) Header() (metadata.MD, error) { return s.hdr, s.hdrErr }
func (s *headerStream) Trailer() metadata.MD         { return nil }
func (s *headerStream) CloseSend() error             { return nil }
func (s *headerStream) Context() context.Context     { return context.Background() }
func (s *headerStream) SendMsg(any) error            { return nil }
func (s *headerStream) RecvMsg(any) error            { return s.recv }

// TestAwaitAck: a connection stream counts as reaching the server that
// holds the agent's session only when the server echoes that session's
// token; another token, a control stream's answer (headers stripped by a
// proxy), a refusal or no answer are not an acknowledgement, and the
// dial's answer must not be sent on such a stream.
func TestAwaitAck(t *testing.T) {
	const token = "session-1"
	for _, tc := range []struct {
		name string
		s    *headerStream
		ok   bool
	}{
		{"the session's token echoed", &headerStream{hdr: metadata.Pairs(netproxy.HeaderSession, token)}, true},
		{"another session's token", &headerStream{hdr: metadata.Pairs(netproxy.HeaderSession, "session-2"), recv: io.EOF}, false},
		{"answered as a control stream", &headerStream{hdr: metadata.Pairs(header.ServerID, "server-1")}, false},
		{"refused", &headerStream{hdr: metadata.MD{}, recv: errors.New("rpc error: code = PermissionDenied")}, false},
		{"no headers, stream ended", &headerStream{hdr: metadata.MD{}, recv: io.EOF}, false},
		{"headers failed", &headerStream{hdrErr: errors.New("reset")}, false},
	} {
		err := awaitAck(tc.s, token, time.Second, func() {})
		if (err == nil) != tc.ok {
			t.Errorf("%s: awaitAck = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
