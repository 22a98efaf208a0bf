package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The agent port is open to anyone who can reach it, and every stream
// carrying a token used to cost a TokenReview: a flood of junk tokens then
// spent the apiserver's capacity and the review client's QPS, and a real
// agent reconnecting after a restart queued behind it. These pure
// functions decide what is cached, for how long, and which streams are
// admitted; reviewcache.go and admission.go apply them.

// Review outcomes, also the result label of the review metric.
const (
	reviewAuthenticated = "authenticated"
	reviewDenied        = "denied"
	reviewError         = "error"
)

// Defaults of the review and admission limits (flags.go documents them).
const (
	DefaultReviewMaxInFlight                = 32
	DefaultReviewTimeout                    = 5 * time.Second
	DefaultReviewCacheTTL                   = 10 * time.Second
	DefaultReviewDenialTTL                  = 2 * time.Second
	DefaultReviewQPS                        = 50
	DefaultReviewBurst                      = 100
	DefaultMaxStreamsPerConnection          = 16
	DefaultMaxUnauthenticatedStreamsPerPeer = 128
)

// reviewCacheUntil is how long a review's outcome may answer the same
// token again: an authentication for ttl, never past the token's own
// expiry (zero when unknown); a denial for denialTTL, so a token that just
// became valid (a pod's token the apiserver does not know yet) is retried
// soon; an error (the apiserver unreachable, the review timed out) not at
// all, as it says nothing about the token. ok is false when nothing is to
// be cached.
func reviewCacheUntil(outcome string, now, expiry time.Time, ttl, denialTTL time.Duration) (until time.Time, ok bool) {
	switch outcome {
	case reviewAuthenticated:
		until = now.Add(ttl)
		if !expiry.IsZero() && expiry.Before(until) {
			until = expiry
		}
	case reviewDenied:
		until = now.Add(denialTTL)
	default:
		return time.Time{}, false
	}
	return until, until.After(now)
}

// tokenExpiry is the exp claim of a JWT, unverified: it only shortens how
// long a review the apiserver did verify is trusted. Zero when the token
// is not a JWT or has no exp.
func tokenExpiry(tok string) time.Time {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}
	}
	exp, err := claims.Exp.Int64()
	if err != nil || exp <= 0 {
		return time.Time{}
	}
	return time.Unix(exp, 0)
}

// StreamLimits cap the agent control streams (Connect without a dial
// header) the server holds; zero takes the default, negative is no cap.
type StreamLimits struct {
	// PerConnection caps the control streams of one gRPC (TCP)
	// connection: an agent needs one, so more is a client multiplexing
	// streams to multiply its reviews. Per-connection data streams
	// (streams-v1) are not counted: they are one per tunnel.
	PerConnection int
	// PerUnauthenticatedPeer caps the streams of one source address still
	// being authenticated: a flooder cannot hold more, while agents from
	// other addresses, and authenticated ones, are unaffected.
	PerUnauthenticatedPeer int
}

func (l StreamLimits) withDefaults() StreamLimits {
	if l.PerConnection == 0 {
		l.PerConnection = DefaultMaxStreamsPerConnection
	}
	if l.PerUnauthenticatedPeer == 0 {
		l.PerUnauthenticatedPeer = DefaultMaxUnauthenticatedStreamsPerPeer
	}
	return l
}

// Reasons a stream is refused, the reason label of the refusal metric.
const (
	refusedPerConnection = "per_connection"
	refusedPerPeer       = "per_unauthenticated_peer"
	refusedReviewsBusy   = "reviews_busy"
)

// admitStream decides whether a new control stream may start, given the
// control streams its connection holds and the streams its peer address
// has in authentication, both before counting it. It returns the refusal
// reason ("" to admit) and the gRPC error: ResourceExhausted, which the
// agent retries with backoff.
func admitStream(l StreamLimits, onConnection, unauthenticatedOnPeer int) (string, error) {
	l = l.withDefaults()
	if l.PerConnection > 0 && onConnection >= l.PerConnection {
		return refusedPerConnection, status.Error(codes.ResourceExhausted,
			fmt.Sprintf("this connection already has %d agent streams (--max-agent-streams-per-connection=%d); an agent needs one per connection", onConnection, l.PerConnection))
	}
	if l.PerUnauthenticatedPeer > 0 && unauthenticatedOnPeer >= l.PerUnauthenticatedPeer {
		return refusedPerPeer, status.Error(codes.ResourceExhausted,
			fmt.Sprintf("%d agent streams from this address are still being authenticated (--max-unauthenticated-streams-per-peer=%d); retry later", unauthenticatedOnPeer, l.PerUnauthenticatedPeer))
	}
	return "", nil
}
