package h2grpc

import (
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

func fields(kv ...string) []hpack.HeaderField {
	var f []hpack.HeaderField
	for i := 0; i+1 < len(kv); i += 2 {
		f = append(f, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return f
}

func TestDecideRequest(t *testing.T) {
	grpcReq := func(extra ...string) []hpack.HeaderField {
		return fields(append([]string{":method", "POST", ":scheme", "http", ":path", "/ProxyService/Proxy",
			":authority", "localhost", "content-type", "application/grpc", "te", "trailers"}, extra...)...)
	}
	for _, tc := range []struct {
		name       string
		fields     []hpack.HeaderField
		method     string
		timeout    time.Duration
		userAgent  string
		md         map[string]string
		httpStatus int
		code       codes.Code
	}{
		{name: "konnectivity client", fields: grpcReq("user-agent", "grpc-go/1.82.1"), method: "/ProxyService/Proxy",
			userAgent: "grpc-go/1.82.1", md: map[string]string{"user-agent": "grpc-go/1.82.1"}},
		{name: "deadline", fields: grpcReq("grpc-timeout", "1500m"), method: "/ProxyService/Proxy", timeout: 1500 * time.Millisecond},
		{name: "deadline already due", fields: grpcReq("grpc-timeout", "0n"), method: "/ProxyService/Proxy", timeout: 0},
		{name: "content subtype", fields: fields(":method", "POST", ":path", "/a/b", "content-type", "application/grpc+proto"), method: "/a/b"},
		{name: "metadata kept, gRPC's own left out", fields: grpcReq("x-trace", "1", "x-trace", "2", "grpc-accept-encoding", "gzip"),
			method: "/ProxyService/Proxy", md: map[string]string{"x-trace": "1"}},
		{name: "identity encoding", fields: grpcReq("grpc-encoding", "identity"), method: "/ProxyService/Proxy"},
		{name: "compressed", fields: grpcReq("grpc-encoding", "gzip"), code: codes.Unimplemented},
		{name: "bad timeout", fields: grpcReq("grpc-timeout", "soon"), code: codes.Internal},
		{name: "GET", fields: fields(":method", "GET", ":path", "/ProxyService/Proxy", "content-type", "application/grpc"), httpStatus: 405},
		{name: "not gRPC", fields: fields(":method", "POST", ":path", "/x", "content-type", "application/json"), httpStatus: 415},
		{name: "no content type", fields: fields(":method", "POST", ":path", "/x"), httpStatus: 415},
		{name: "grpc-web is not gRPC", fields: fields(":method", "POST", ":path", "/x", "content-type", "application/grpc-web"), httpStatus: 415},
		{name: "unknown pseudo-header", fields: grpcReq(":protocol", "websocket"), httpStatus: 400},
		{name: "relative path", fields: fields(":method", "POST", ":path", "ProxyService/Proxy", "content-type", "application/grpc"), code: codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ref := decideRequest(tc.fields)
			if tc.httpStatus != 0 || tc.code != codes.OK {
				if ref == nil {
					t.Fatalf("accepted %+v, want a refusal (HTTP %d, code %v)", r, tc.httpStatus, tc.code)
				}
				if ref.httpStatus != tc.httpStatus || ref.code != tc.code || ref.msg == "" {
					t.Fatalf("refusal %+v, want HTTP %d, code %v and a message", *ref, tc.httpStatus, tc.code)
				}
				return
			}
			if ref != nil {
				t.Fatalf("refused: %+v", *ref)
			}
			hasTimeout := false
			for _, f := range tc.fields {
				hasTimeout = hasTimeout || f.Name == "grpc-timeout"
			}
			if r.hasTimeout != hasTimeout {
				t.Fatalf("hasTimeout %v, want %v", r.hasTimeout, hasTimeout)
			}
			if r.method != tc.method || r.timeout != tc.timeout || r.userAgent != tc.userAgent {
				t.Fatalf("got method %q timeout %v user agent %q, want %q %v %q", r.method, r.timeout, r.userAgent, tc.method, tc.timeout, tc.userAgent)
			}
			for k, v := range tc.md {
				if len(r.md[k]) == 0 || r.md[k][0] != v {
					t.Fatalf("metadata %s = %v, want %q first", k, r.md[k], v)
				}
			}
			for k := range r.md {
				if k[0] == ':' || len(k) > 5 && k[:5] == "grpc-" || k == "content-type" || k == "te" {
					t.Fatalf("metadata has %q, which is the protocol's", k)
				}
			}
		})
	}
}

func TestParseTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "1H", want: time.Hour},
		{in: "2M", want: 2 * time.Minute},
		{in: "30S", want: 30 * time.Second},
		{in: "1500m", want: 1500 * time.Millisecond},
		{in: "7u", want: 7 * time.Microsecond},
		{in: "99999999n", want: 99999999},
		{in: "99999999H", want: 1 << 62}, // capped, not overflowed
		{in: "0m", want: 0},
		{in: "m", err: true},
		{in: "123456789S", err: true}, // 9 digits
		{in: "10x", err: true},
		{in: "-1S", err: true},
		{in: "1.5S", err: true},
		{in: "", err: true},
	} {
		got, err := parseTimeout(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestEncodeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"dial refused: no agent": "dial refused: no agent",
		"100% sure":              "100%25 sure",
		"line\nbreak":            "line%0Abreak",
		"naïve":                  "na%C3%AFve",
		"tab\tand ~":             "tab%09and ~",
	} {
		if got := encodeMessage(in); got != want {
			t.Errorf("encodeMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWindowUpdate(t *testing.T) {
	for _, tc := range []struct {
		owed, window uint32
		want         bool
	}{
		{owed: 0, window: 1 << 20, want: false},
		{owed: 1, window: 1 << 20, want: false},
		{owed: 1<<18 - 1, window: 1 << 20, want: false},
		{owed: 1 << 18, window: 1 << 20, want: true},
		{owed: 1 << 20, window: 1 << 20, want: true},
		{owed: 16383, window: 65535, want: true},
		{owed: 16382, window: 65535, want: false},
		{owed: 1, window: 3, want: true}, // a tiny window: every byte
	} {
		if got := windowUpdate(tc.owed, tc.window); got != tc.want {
			t.Errorf("windowUpdate(%d, %d) = %v, want %v", tc.owed, tc.window, got, tc.want)
		}
	}
}
