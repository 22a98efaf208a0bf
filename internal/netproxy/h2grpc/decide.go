package h2grpc

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// request is what a stream's HEADERS ask for, decided before a handler
// runs: which method, until when, and with which metadata.
type request struct {
	method     string
	hasTimeout bool // grpc-timeout was sent; 0 then means already due
	timeout    time.Duration
	userAgent  string
	md         map[string][]string
}

// refusal is how a request that no handler may see is answered: an HTTP
// status without gRPC (httpStatus != 0), or gRPC's trailers-only status.
type refusal struct {
	httpStatus int
	code       codes.Code
	msg        string
}

// decideRequest reads a request's header fields as gRPC over HTTP/2
// defines them (grpc/doc/PROTOCOL-HTTP2.md) and says either what it asks
// for or how to refuse it. Whether the method exists is the caller's.
func decideRequest(fields []hpack.HeaderField) (request, *refusal) {
	var r request
	var method, contentType string
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			r.method = f.Value
		case ":scheme", ":authority", "te":
		case "content-type":
			contentType = f.Value
		case "grpc-timeout":
			d, err := parseTimeout(f.Value)
			if err != nil {
				return r, &refusal{code: codes.Internal, msg: "malformed grpc-timeout: " + err.Error()}
			}
			r.timeout, r.hasTimeout = d, true
		case "grpc-encoding":
			// Nothing was offered (no grpc-accept-encoding), so a client
			// may only send uncompressed messages.
			if f.Value != "identity" {
				return r, &refusal{code: codes.Unimplemented, msg: fmt.Sprintf("grpc-encoding %q is not supported: send uncompressed messages", f.Value)}
			}
		default:
			if strings.HasPrefix(f.Name, ":") {
				return r, &refusal{httpStatus: 400, msg: "unexpected pseudo-header " + f.Name}
			}
			if f.Name == "user-agent" {
				r.userAgent = f.Value
			}
			if strings.HasPrefix(f.Name, "grpc-") {
				continue // gRPC's own, not the application's metadata
			}
			if r.md == nil {
				r.md = map[string][]string{}
			}
			r.md[f.Name] = append(r.md[f.Name], f.Value)
		}
	}
	if method != "POST" {
		return r, &refusal{httpStatus: 405, msg: "gRPC requests are POST, not " + method}
	}
	if contentType != "application/grpc" && !strings.HasPrefix(contentType, "application/grpc+") && !strings.HasPrefix(contentType, "application/grpc;") {
		return r, &refusal{httpStatus: 415, msg: "content-type " + strconv.Quote(contentType) + " is not gRPC's (application/grpc)"}
	}
	if r.method == "" || r.method[0] != '/' {
		return r, &refusal{code: codes.Unimplemented, msg: "malformed method name " + strconv.Quote(r.method)}
	}
	return r, nil
}

// parseTimeout reads a grpc-timeout value: at most 8 digits and a unit.
func parseTimeout(v string) (time.Duration, error) {
	if len(v) < 2 || len(v) > 9 {
		return 0, fmt.Errorf("%q is not 1-8 digits and a unit", v)
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not 1-8 digits and a unit", v)
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, fmt.Errorf("unit %q is not one of H M S m u n", v[len(v)-1:])
	}
	// 8 digits of hours overflow a Duration: cap, as "no deadline soon".
	if n > int64(1<<62)/int64(unit) {
		return 1 << 62, nil
	}
	return time.Duration(n) * unit, nil
}

// encodeMessage percent-encodes a grpc-message value: printable ASCII
// but '%' as is, every other byte as %XX.
func encodeMessage(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// windowUpdate says whether received bytes not yet returned to the peer
// should be returned now: once a quarter of the window is owed, so a
// stream of small messages costs a WINDOW_UPDATE per quarter window and
// a sender never waits on bytes this side has already consumed.
func windowUpdate(owed, window uint32) bool {
	return owed > 0 && owed >= window/4
}
