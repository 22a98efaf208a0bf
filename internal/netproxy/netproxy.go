// Package netproxy holds what the Portside network proxy server and agent
// share: the metadata keys of the head-of-line-free "streams-v1" extension,
// the gRPC transport tuning, and packet constructors for the upstream
// konnectivity (apiserver-network-proxy, "ANP") wire protocol.
//
// The wire protocol is upstream's: frontends speak ProxyService.Proxy and
// agents AgentService.Connect with the generated types. Portside peers add
// one thing, negotiated in gRPC metadata: each proxied connection gets its
// own gRPC stream between server and agent, so HTTP/2 per-stream flow
// control isolates connections. An upstream peer never sees the extension.
//
// streams-v1, step by step:
//
//  1. The agent opens its control stream (AgentService.Connect) with
//     upstream's agentID/agentIdentifiers metadata plus
//     "x-portside-proxy: streams-v1".
//  2. A Portside server that implements it adds to its response headers
//     (next to serverID and serverCount) "x-portside-proxy: streams-v1" and
//     "x-portside-session: <random token>". Without both, the agent speaks
//     upstream's single-stream protocol; an upstream agent never asks.
//  3. The server sends DIAL_REQ (and DIAL_CLS) on the control stream as
//     usual. A failed dial is answered there with DIAL_RSP{error}.
//  4. A successful dial opens a new AgentService.Connect stream on the same
//     HTTP/2 connection with metadata agentID, "x-portside-session: <token>"
//     and "x-portside-dial: <DialRequest.random>"; its first packet is
//     DIAL_RSP{random, connectID}. The session token stands in for the
//     control stream's authentication (mTLS is per connection anyway).
//  5. DATA flows both ways on that stream only. The agent ends it with
//     CLOSE_RSP when the destination closes; the server ends it (the
//     handler returns, resetting the stream) when the frontend closes, and
//     answers the frontend's CLOSE_REQ itself. The agent closes its socket
//     whenever the stream ends.
//
// Memory per connection is bounded by the fixed stream window (StreamWindow)
// on each hop plus one read buffer; gRPC's connection window is returned
// on receipt, so a stalled stream cannot starve its siblings.
package netproxy

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
)

const (
	// HeaderFeatures is sent by a Portside agent on its control stream and
	// echoed by a Portside server only if it implements the value; upstream
	// servers ignore unknown metadata, so the agent falls back by itself.
	HeaderFeatures = "x-portside-proxy"
	// FeatureStreamsV1: one AgentService.Connect stream per proxied
	// connection, opened by the agent after a successful dial.
	FeatureStreamsV1 = "streams-v1"
	// HeaderSession is the server's answer to a streams-v1 control stream:
	// an unguessable token the agent presents on its per-connection streams,
	// so they need no second authentication (a TokenReview per dial would
	// cost an apiserver round trip).
	HeaderSession = "x-portside-session"
	// HeaderDial names the dial (DialRequest.random) a per-connection
	// stream answers.
	HeaderDial = "x-portside-dial"
	// FeatureStreamsAck, offered beside FeatureStreamsV1 by a server: it
	// answers a per-connection stream whose session it knows with
	// HeaderSession in its response headers before anything else, and
	// takes a streams-v1 agent's connections on the control stream too. An
	// agent whose stream reached a server without the session (an L7 proxy
	// in between) then fails that dial at once and falls back.
	FeatureStreamsAck = "streams-v1-ack"
)

// Transport sizes. The stream window bounds what one stalled connection can
// hold in flight; the connection window is large so that a stalled stream
// never starves its siblings (gRPC returns connection-level credit on
// receipt, stream-level credit only when the application reads).
const (
	StreamWindow  = 1 << 20
	ConnWindow    = 64 << 20
	IOBufferSize  = 256 << 10
	MaxMsgSize    = 32 << 20
	CopyBufSize   = 256 << 10
	DefaultDialTO = 5 * time.Second
)

// ServerOptions tunes a gRPC server that carries proxied bytes.
func ServerOptions(keepaliveTime time.Duration) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.InitialWindowSize(StreamWindow),
		grpc.InitialConnWindowSize(ConnWindow),
		grpc.ReadBufferSize(IOBufferSize),
		grpc.WriteBufferSize(IOBufferSize),
		grpc.MaxRecvMsgSize(MaxMsgSize),
		grpc.MaxSendMsgSize(MaxMsgSize),
		// Thousands of short connections each open a stream; the default
		// limit is effectively unbounded, keep it explicit and large.
		grpc.MaxConcurrentStreams(1 << 20),
		// Agents and kube-apiserver may ping; refusing them with GOAWAY
		// would drop every proxied connection on that transport.
		experimental.BufferPool(sharedPool),
		grpc.ForceServerCodecV2(codec{}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if keepaliveTime > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime}))
	}
	return opts
}

// DialOptions tunes the agent's gRPC client connection to a server.
func DialOptions(keepaliveTime time.Duration) []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithInitialWindowSize(StreamWindow),
		grpc.WithInitialConnWindowSize(ConnWindow),
		grpc.WithReadBufferSize(IOBufferSize),
		grpc.WithWriteBufferSize(IOBufferSize),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgSize), grpc.MaxCallSendMsgSize(MaxMsgSize),
			grpc.ForceCodecV2(codec{})),
		experimental.WithBufferPool(sharedPool),
	}
	if keepaliveTime > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, PermitWithoutStream: true}))
	}
	return opts
}
